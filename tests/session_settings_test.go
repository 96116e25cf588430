package tests

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The pack's functions parse their bodies (and the fence its statements) in the
// caller's session, with the caller's standard_conforming_strings. Under "off", a
// literal with a backslash means something else: the fence's '\x…'::bytea MAC prefix
// became other bytes, so one writer's SET standard_conforming_strings = off made every
// fence it fired fail the runner's MAC check, and the stream blocked (fence_mismatch)
// — any role that may write a registered table could stop capture with one setting.
// Pull and rebuild failed (22021, 42601) and the authorizer check refused a valid
// authorizer. Found by review; every such literal is now E'…' or decode(…, 'hex'),
// which parse the same under either setting.

// scsOff opens a session with standard_conforming_strings = off from its start, so
// every function it calls is compiled under that setting.
func scsOff(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["standard_conforming_strings"] = "off"
	cfg.RuntimeParams["escape_string_warning"] = "off"
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	var v string
	require.NoError(t, c.QueryRow(context.Background(), `SHOW standard_conforming_strings`).Scan(&v))
	require.Equal(t, "off", v)
	return c
}

// TestFenceUnderStandardConformingStringsOff: writes (first fence of a row, the full
// check of a second change, a delete) and an activation that generates a new fence,
// each from a session with standard_conforming_strings = off, materialize without a
// quarantine.
func TestFenceUnderStandardConformingStringsOff(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	ctx := context.Background()
	c := scsOff(t, db.URL)
	_, err := c.Exec(ctx, `INSERT INTO items (id, owner) VALUES (77, 'a')`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `BEGIN; UPDATE items SET owner = 'b' WHERE id = 77;
		UPDATE items SET owner = 'c' WHERE id = 77; DELETE FROM items WHERE id = 1; COMMIT`)
	require.NoError(t, err)
	// The activation generates the new relation's fence (synchro._fence_source) in this
	// session: the MAC's domain prefix it bakes in must be the same bytes.
	_, err = c.Exec(ctx, `CREATE TABLE scs_notes (id text PRIMARY KEY, body text);
		SELECT synchro.register_table('scs_notes', 'scs_notes');
		SELECT synchro.activate_registry();`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `INSERT INTO scs_notes VALUES ('a\\b', 'x')`)
	require.NoError(t, err)
	mustExec(t, db, `INSERT INTO scs_notes VALUES ('later', 'y')`)
	eventually(t, 30*time.Second, "the writes materialized", func() bool {
		return len(quarantines(t, db)) > 0 || countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE pk = 'later'`) == 1
	})
	require.Empty(t, quarantines(t, db))
	require.Equal(t, "c", textOf(t, db, `SELECT image ->> 'owner' FROM synchro.projection WHERE pk = '77'`))
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.projection p JOIN synchro.relation r USING (relation_id)
		WHERE r.table_id = 'items' AND p.pk = '1'`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE pk = 'a\b'`))
}

// TestReadPathUnderStandardConformingStringsOff: pull with a valid cursor and a rebuild,
// from a session with standard_conforming_strings = off, answer as in any other session.
func TestReadPathUnderStandardConformingStringsOff(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one');`)
	db := e.db
	_, cur := startScope(t, db, "scs", "owner:a")
	ctx := context.Background()
	c := scsOff(t, db.URL)
	var out string
	require.NoError(t, c.QueryRow(ctx, `SELECT synchro.pull('scs', 'owner:a', $1, 10)::text`, cur).Scan(&out), "pull")
	require.NoError(t, c.QueryRow(ctx, `SELECT synchro.rebuild('scs', 'owner:a', NULL, 10)::text`).Scan(&out), "rebuild")
	require.Contains(t, out, `"checksum"`)
}

// TestFunctionLiteralsParseUnderEitherSetting: no string literal of a function file
// holds a backslash unless it is an escape string (E'…'), which means the same bytes
// whatever the caller's standard_conforming_strings. Comments are skipped; a literal is
// taken as the text between two quotes on one line, which is how every literal of the
// pack is written.
func TestFunctionLiteralsParseUnderEitherSetting(t *testing.T) {
	files, err := filepath.Glob("../sql/functions/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	lit := regexp.MustCompile(`(^|[^A-Za-z0-9_])([Ee]?)'((?:[^']|'')*)'`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			code := line
			if j := strings.Index(code, "--"); j >= 0 && !strings.Contains(code[:j], "'") {
				code = code[:j]
			}
			for _, m := range lit.FindAllStringSubmatch(code, -1) {
				if m[2] == "" && strings.Contains(m[3], `\`) {
					t.Errorf("%s:%d: literal with a backslash outside E'…': %s", filepath.Base(f), i+1, strings.TrimSpace(line))
				}
			}
		}
	}
}
