package tests

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// A key stored out of line: a long text key in a wide row, moved to the TOAST table.
// An UPDATE that leaves the key as it is carries it in the new tuple as unchanged
// TOAST (pgoutput's 'u'; wal2json leaves the column out), and PostgreSQL logs the old
// key tuple whenever a key column is stored externally, so the key is in the WAL. The
// runner takes it from there: the update is materialized (the row moves to its new
// scope), not quarantined as a fence mismatch for a key it could not find. A value
// PostgreSQL accepted must never stop the stream.
func TestRunnerToastedKeyUpdate(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		// EXTERNAL: out of line without compression. The row (a 1,000-byte key and two
		// 600-byte values) is over the 2 kB TOAST threshold, and the largest value, the
		// key, goes out of line first.
		mustExec(t, db, `
			CREATE TABLE docs (id text PRIMARY KEY, owner text, a text, b text);
			ALTER TABLE docs ALTER COLUMN id SET STORAGE EXTERNAL, ALTER COLUMN a SET STORAGE EXTERNAL,
			                 ALTER COLUMN b SET STORAGE EXTERNAL;
			SELECT synchro.register_table('docs', 'docs');
			SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)

		rng := rand.New(rand.NewSource(7))
		text := func(n int) string {
			var b strings.Builder
			for i := 0; i < n; i++ {
				b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[rng.Intn(36)])
			}
			return b.String()
		}
		key := text(1000)
		mustExec(t, db, `INSERT INTO docs VALUES ($1, 'a', $2, $3)`, key, text(600), text(600))
		require.Equal(t, 1000, countOf(t, db, `SELECT sum(octet_length(chunk_data))::int FROM `+toastTable(t, db, "docs")),
			"the key alone is stored out of line")
		waitEffects(t, db, 1)

		mustExec(t, db, `UPDATE docs SET owner = 'b' WHERE id = $1`, key)
		got := waitEffects(t, db, 3)
		require.Equal(t, []string{"owner:a upsert", "owner:a delete", "owner:b upsert"},
			[]string{got[0].Scope + " " + got[0].Op, got[1].Scope + " " + got[1].Op, got[2].Scope + " " + got[2].Op})
		for _, e := range got {
			require.Equal(t, key, e.PK)
		}
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.quarantine`), "nothing quarantined")
		require.Equal(t, key, textOf(t, db, `SELECT image ->> 'id' FROM synchro.projection`))
		require.Equal(t, "b", textOf(t, db, `SELECT image ->> 'owner' FROM synchro.projection`))
		require.NoError(t, rr.stop(t))
	})
}

// toastTable names the TOAST table of a table.
func toastTable(t *testing.T, db *testdb.DB, table string) string {
	t.Helper()
	return textOf(t, db, `SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = $1::regclass`, table)
}

// An array column stored out of line and left unchanged by an UPDATE comes as unchanged
// TOAST; the reference path takes its value from the prior projection, where it is
// rendered (a JSON array). Put back into the staged row, it was cast again as the
// array's text and failed (22P02): a good transaction quarantined. It goes into the
// image as rendered.
func TestRunnerToastedArrayUpdate(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE tagged (id int8 PRIMARY KEY, owner text, tags text[]);
			ALTER TABLE tagged ALTER COLUMN tags SET STORAGE EXTERNAL;
			SELECT synchro.register_table('tagged', 'tagged');
			SELECT synchro.add_scope_rule('tagged', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)

		mustExec(t, db, `INSERT INTO tagged SELECT 1, 'a', array_agg(md5(g::text)) FROM generate_series(1, 100) g`)
		require.Equal(t, 1, countOf(t, db, `SELECT count(DISTINCT chunk_id)::int FROM `+toastTable(t, db, "tagged")),
			"the array is stored out of line")
		waitEffects(t, db, 1)
		want := textOf(t, db, `SELECT to_jsonb(tags)::text FROM tagged`)

		mustExec(t, db, `UPDATE tagged SET owner = 'b' WHERE id = 1`)
		waitEffects(t, db, 3)
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.quarantine`), "nothing quarantined")
		require.Equal(t, "b", textOf(t, db, `SELECT image ->> 'owner' FROM synchro.projection`))
		require.Equal(t, want, textOf(t, db, `SELECT (image -> 'tags')::text FROM synchro.projection`))
		require.Equal(t, want, textOf(t, db, `SELECT (image -> 'tags')::text FROM synchro.effect WHERE scope = 'owner:b'`))
		require.NoError(t, rr.stop(t))
	})
}
