package main

import (
	"net/url"
	"regexp"
	"strings"
)

// dsnPassword matches password=... in a keyword/value connection string, quoted or not.
var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactURL hides the password of a connection string, in URL form (user:pass@ or a
// password query parameter) or keyword/value form, for logs and error messages.
func redactURL(raw string) string {
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		u, err := url.Parse(raw)
		if err != nil {
			return "(unparsable URL)" // the raw text may hold a password
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	return dsnPassword.ReplaceAllString(raw, "${1}xxxxx")
}
