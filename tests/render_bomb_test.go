package tests

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Values small as stored whose text is huge, or deeper than the runner parses: each
// was accepted by PostgreSQL and then stopped or poisoned the stream, so the fence
// must refuse it in the writing statement.
//
//   - A numeric keeps its weight and display scale, not its digits: round(1e131071,
//     16383) is a few bytes and renders as 147,456 characters. 7,500 of them in a
//     numeric[] or a jsonb array are a few kB stored and 1.1 GB as text. The decoders
//     render every column of a published row as text in the walsender (registered or
//     not), which fails past 1 GB, at every restart: the stream stopped for good, under
//     both decoders (found in the twelfth session, before the fix).
//   - 300 of them are 44 MB as text: under the walsender's limit, over the documented
//     32 MiB of registered values, which counted a numeric[] or a jsonb by its stored
//     size when that was under 8 kB.
//   - A json column keeps its text, but the row image holds it as jsonb, whose numbers
//     render with all their digits: '[1e131071, ...]' is 9 bytes an element as json.
//   - json nested deeper than 10,000 levels (PostgreSQL accepts about 12,000 here)
//     failed the runner's JSON validation: quarantined as decode_malformed.
//
// The attacker is the application role that owns the table, so it may also add a
// column after the fence was generated.
func TestBoundaryRenderBombsRefusedAtSource(t *testing.T) {
	t.Parallel()
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		e := newAppEnv(t, `
			CREATE TABLE app.docs (id int8 PRIMARY KEY, owner text, body jsonb, doc json, nums numeric[], note text,
			                       hidden numeric[], xs float8[])`, `
			SELECT synchro.register_table('app.docs', 'docs', ARRAY['owner', 'body', 'doc', 'nums', 'note', 'xs']::name[]);
			SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
			SELECT synchro.activate_registry();`, nil)
		const sentinel = "SENTINEL-5b2e91"
		const bomb = `(SELECT array_agg(round(1e131071::numeric, 16383)) FROM generate_series(1, %d))`
		n := func(count int) string { return strings.Replace(bomb, "%d", strconv.Itoa(count), 1) }
		e.appExec(t, `INSERT INTO app.docs (id, owner, note) VALUES (1, 'a', 'seed')`)

		var errs []*pgconn.PgError
		refused := func(sql string, args ...any) {
			t.Helper()
			pe := e.appFails(t, sql, args...)
			require.Equal(t, "22001", pe.Code, "%s: %s", sql, pe.Message)
			require.Contains(t, pe.Message, "documented", "the message names the rule: %s", pe.Message)
			errs = append(errs, pe)
		}
		// The refusals happen in the writing statement, before any decoder sees the row
		// (an aborted transaction's changes never reach an output plugin), and each
		// renders up to 1.1 GB in the fence (seconds of CPU): they run under one decoder.
		// The other runs the cheap ones and what must stay accepted and flow.
		//
		// json and jsonb nested one level past the documented 8,000.
		refused(`INSERT INTO app.docs (id, owner, note, doc) VALUES (7, 'a', $1, $2::json)`, sentinel, nestedIn(8001, sentinel))
		refused(`UPDATE app.docs SET body = $2::jsonb, note = $1 WHERE id = 1`, sentinel, nestedIn(8001, sentinel))
		if decoderOf(t) == "pgoutput" {
			// Two ways to be refused: a rendering the fence cannot make at all (over 1 GB:
			// 7,500 of them, 1.1 GB; the case that stopped the walsender), and one it makes
			// and finds over the documented size (1,000 of them, 147 MB: over the row's
			// 128 MiB).
			// In a column that is not registered: on insert and on update.
			refused(`INSERT INTO app.docs (id, owner, note, hidden) VALUES (2, 'a', $1, `+n(7500)+`)`, sentinel)
			refused(`UPDATE app.docs SET hidden = `+n(1000)+`, note = $1 WHERE id = 1`, sentinel)
			// The same in a jsonb array, registered.
			refused(`INSERT INTO app.docs (id, owner, note, body) VALUES (3, 'a', $1, to_jsonb(`+n(7500)+`))`, sentinel)
			// 44 MB of registered values, 3 kB stored: numeric[], jsonb, and json text whose
			// numbers jsonb renders in full.
			refused(`INSERT INTO app.docs (id, owner, note, nums) VALUES (4, 'a', $1, `+n(300)+`)`, sentinel)
			refused(`INSERT INTO app.docs (id, owner, note, body) VALUES (5, 'a', $1, to_jsonb(`+n(300)+`))`, sentinel)
			refused(`INSERT INTO app.docs (id, owner, note, doc) VALUES (6, 'a', $1,
			('[' || (SELECT string_agg('1e131071', ',') FROM generate_series(1, 300)) || ']')::json)`, sentinel)
			// A float8 array as the image holds it: 5e-324 is 7 characters from float8out
			// and 328 as the jsonb number to_jsonb makes of it (found by review).
			refused(`INSERT INTO app.docs (id, owner, note, xs) VALUES (9, 'a', $1,
			(SELECT array_agg(5e-324::float8) FROM generate_series(1, 110000)))`, sentinel)
			// A column the owner adds after the fence was generated is a column of the row.
			e.appExec(t, `ALTER TABLE app.docs ADD COLUMN later numeric[]`)
			refused(`INSERT INTO app.docs (id, owner, note, later) VALUES (8, 'a', $1, `+n(1000)+`)`, sentinel)
		}

		// What stays accepted and flows: 8,000 levels, a 44 MB unregistered value (under
		// the row's 128 MiB), a numeric with every digit (147 kB as text).
		e.appExec(t, `INSERT INTO app.docs (id, owner, doc, body) VALUES (10, 'a', $1::json, $1::jsonb)`, nestedIn(8000, "deep"))
		e.appExec(t, `INSERT INTO app.docs (id, owner, hidden) VALUES (11, 'a', `+n(300)+`)`)
		e.appExec(t, `INSERT INTO app.docs (id, owner, nums) VALUES (12, 'a', ARRAY[round(1e131071::numeric, 16383)])`)
		e.appExec(t, `INSERT INTO app.docs (id, owner, xs) VALUES (13, 'a', ARRAY[5e-324, 1.5]::float8[])`)
		e.requireHealthy(t, `INSERT INTO app.docs (id, owner) VALUES (99, 'a')`, "99")
		for _, pk := range []string{"10", "11", "12", "13"} {
			require.Equal(t, 1, countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk = $1`, pk), pk)
		}
		var depth int
		require.NoError(t, e.db.Pool.QueryRow(context.Background(), `
			SELECT length(image ->> 'doc') - length(replace(image ->> 'doc', '[', '')) FROM synchro.projection WHERE pk = '10'`).Scan(&depth))
		require.Equal(t, 8000, depth, "the deep document is projected whole")
		require.Zero(t, countOf(t, e.db, `SELECT count(*) FROM app.docs WHERE id BETWEEN 2 AND 9`))
		e.requireNoSentinel(t, sentinel, errs...)
	})
}

// nestedIn is a JSON document depth arrays deep around a string.
func nestedIn(depth int, s string) string {
	return strings.Repeat("[", depth) + `"` + s + `"` + strings.Repeat("]", depth)
}
