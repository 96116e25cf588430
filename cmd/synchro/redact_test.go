package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db", "postgresql://u@h/db"},
		{"postgres://u@h/db?password=secret", "postgres://u@h/db?password=xxxxx"},
		{"host=h user=u password=secret dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password='se cret' dbname=db", "host=h password=xxxxx dbname=db"},
		{"postgres://u:sec%zzret@h/db", "(unparsable URL)"},
		// The scheme is case-insensitive (RFC 3986), and so is libpq.
		{"POSTGRES://u:secret@h/db", "postgres://u:xxxxx@h/db"},
		{"PostgreSQL://u:secret@h/db?password=secret", "postgresql://u:xxxxx@h/db?password=xxxxx"},
		{"Postgres://u@h/db?PASSWORD=secret", "postgres://u@h/db?PASSWORD=xxxxx"},
	} {
		got := redactURL(tc.in)
		require.Equal(t, tc.want, got, tc.in)
		require.NotContains(t, got, "secret")
	}
}
