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
//
// The scheme is matched whatever its case (URL schemes are case-insensitive), and any
// text with a "scheme://" that is not one of ours is treated as unparsable rather than
// as keyword/value text, so it never reaches a log unredacted.
func redactURL(raw string) string {
	lower := strings.ToLower(raw)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		u, err := url.Parse(raw)
		if err != nil {
			return "(unparsable URL)" // the raw text may hold a password
		}
		q := u.Query()
		changed := false
		for k := range q {
			if strings.EqualFold(k, "password") {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	if strings.Contains(raw, "://") {
		return "(unparsable URL)"
	}
	return dsnPassword.ReplaceAllString(raw, "${1}xxxxx")
}
