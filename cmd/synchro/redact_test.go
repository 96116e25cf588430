package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// describeDB is an allow-list (host, port, database, user): no password form shows,
// whatever the syntax. A pattern-based redaction missed `password = x` inside pgx's
// parse error, a backslash-escaped password and sslpassword in a URL (found by review).
func TestDescribeDB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db?sslmode=disable", "host=h port=5432 database=db user=u"},
		{"postgresql://u@h/db", "host=h port=5432 database=db user=u"},
		{"postgres://u@h/db?password=secret", "host=h port=5432 database=db user=u"},
		{"postgres://u@h/db?sslmode=disable&sslpassword=secret", "host=h port=5432 database=db user=u"},
		{"host=h user=u password=secret dbname=db", "host=h port=5432 database=db user=u"},
		{"host=h password='se cret' dbname=db user=u", "host=h port=5432 database=db user=u"},
		{`host=h password=abc\ secret dbname=db user=u`, "host=h port=5432 database=db user=u"},
		{"host=h password = secret port=x dbname=db", "(unparsable connection string)"},
		{"postgres://u:sec%zzret@h/db", "(unparsable connection string)"},
		{"POSTGRES://u:secret@h/db", "(unparsable connection string)"}, // libpq's prefixes are lower case
	} {
		got := describeDB(tc.in)
		require.Equal(t, tc.want, got, tc.in)
		require.NotContains(t, got, "secret")
		_, err := parseDB(tc.in)
		if err != nil {
			require.True(t, errors.Is(err, errBadURL))
			require.NotContains(t, err.Error(), "secret")
		}
	}
}

// A user name with an escaped "@" (Azure's user@server) and a database name with an
// escaped "@" parse and are described; a password's unescaped "/" is refused.
func TestMisparsedOnlyRefusesAnUnescapedAtInThePath(t *testing.T) {
	for raw, refused := range map[string]bool{
		"postgres://app%40server:pw@host:5432/db":          false,
		"postgres://app:pw@host/d%40b":                     false,
		"host=localhost user=a@b dbname=db":                false,
		"postgres://app:2024/SECRET@host/db":               true,
		"postgresql://app:/SECRET@host/db?sslmode=disable": true,
	} {
		_, err := parseDB(raw)
		if refused != (err != nil) {
			t.Errorf("parseDB(%q): err %v, want refused %v", raw, err, refused)
		}
	}
}
