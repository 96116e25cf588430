package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/tests/testdb"
)

// The privilege boundary (issue 13, docs/security.md). The threat model: an application
// login that is a member of synchro_app and owns its own schema (as applications
// commonly do) is hostile. Every test here sets up exactly that role and attacks from
// it; the pack's owner is the harness's superuser.

// hostileApp is an application login in synchro_app, with its own session (SET ROLE
// on a dedicated connection of the test's superuser).
type hostileApp struct {
	t     *testing.T
	ctx   context.Context
	db    *testdb.DB
	role  string
	ident string
	// schema is the role's own schema (AUTHORIZATION role), "" for a role without one.
	schema string
	conn   *pgx.Conn

	mu      sync.Mutex
	notices []string // the messages of the notices its session received
}

func (h *hostileApp) takeNotices() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.notices
	h.notices = nil
	return n
}

// snoopNotice is the body of a function that reports, as a notice to the calling
// session, who runs it and whether that role can read the server key (a notice
// survives the rollback of a failing call).
const snoopNotice = `
DECLARE
  n bigint;
BEGIN
  BEGIN
    SELECT pg_catalog.count(*) INTO n FROM synchro.server_key;
  EXCEPTION WHEN insufficient_privilege THEN
    n := NULL;
  END;
  RAISE NOTICE 'snoop who=% key_rows=%', current_user, coalesce(n::text, 'denied');
  RETURN true;
END`

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newHostileApp creates a unique LOGIN role in synchro_app. With ownSchema it also gets
// its own schema (CREATE SCHEMA ... AUTHORIZATION) holding a table it owns, t (text
// key), registered and activated by the pack's owner, with one row 'seed'.
func newHostileApp(t *testing.T, db *testdb.DB, ownSchema bool) *hostileApp {
	t.Helper()
	ctx := context.Background()
	role := "hostile_" + randomSuffix()
	h := &hostileApp{t: t, ctx: ctx, db: db, role: role, ident: pgx.Identifier{role}.Sanitize()}
	mustExec(t, db, `CREATE ROLE `+h.ident+` LOGIN IN ROLE synchro_app`)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = db.Pool.Exec(ctx, `DROP OWNED BY `+h.ident+` CASCADE`)
		_, _ = db.Pool.Exec(ctx, `DROP ROLE `+h.ident)
	})
	if ownSchema {
		h.schema = "app_" + randomSuffix()
		s := pgx.Identifier{h.schema}.Sanitize()
		mustExec(t, db, `CREATE SCHEMA `+s+` AUTHORIZATION `+h.ident)
		mustExec(t, db, fmt.Sprintf(`
			SET ROLE %[2]s;
			CREATE TABLE %[1]s.t (id text PRIMARY KEY, body text);
			INSERT INTO %[1]s.t (id, body) VALUES ('seed', 'seed');
			RESET ROLE;
			SELECT synchro.register_table('%[1]s.t', 'app_t');
			SELECT synchro.activate_registry();`, s, h.ident))
	}
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.notices = append(h.notices, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `SET ROLE `+h.ident)
	require.NoError(t, err)
	h.conn = conn
	return h
}

func (h *hostileApp) exec(sql string, args ...any) {
	h.t.Helper()
	_, err := h.conn.Exec(h.ctx, sql, args...)
	require.NoError(h.t, err, sql)
}

func (h *hostileApp) qs() string { return pgx.Identifier{h.schema}.Sanitize() }

// snoop is the body of a function that records who runs it (current_user) and whether
// that role can read the server key, into the table named by logTable.
func snoop(logTable string) string {
	return fmt.Sprintf(`
BEGIN
  BEGIN
    INSERT INTO %[1]s (who, key_rows) SELECT current_user, (SELECT pg_catalog.count(*) FROM synchro.server_key);
  EXCEPTION WHEN insufficient_privilege THEN
    INSERT INTO %[1]s (who, key_rows) VALUES (current_user, NULL);
  END;
  RETURN true;
END`, logTable)
}

// requireOnlyRanAs requires that every row of the log says the code ran as role and
// could not read the server key.
func requireOnlyRanAs(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, logTable, role string) {
	t.Helper()
	var others, keyReads int
	require.NoError(t, q.QueryRow(context.Background(), fmt.Sprintf(
		`SELECT count(*) FILTER (WHERE who <> $1), count(*) FILTER (WHERE key_rows IS NOT NULL) FROM %s`, logTable),
		role).Scan(&others, &keyReads))
	require.Zero(t, others, "the caller's code ran as another role (the pack's owner)")
	require.Zero(t, keyReads, "the caller's code read synchro.server_key")
}

// moodKit creates, in the hostile app's schema, the log and snoop() of snoop, an enum
// mood and two functions that snoop when called: mood_text (mood to text) and mood_json
// (mood to json), for casts a test then declares on it.
func (h *hostileApp) moodKit() {
	h.t.Helper()
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.log (who text, key_rows bigint);
		CREATE FUNCTION %[1]s.snoop() RETURNS boolean LANGUAGE plpgsql AS $f$ %[2]s $f$;
		CREATE TYPE %[1]s.mood AS ENUM ('ok', 'sad');
		CREATE FUNCTION %[1]s.mood_json(v %[1]s.mood) RETURNS json LANGUAGE plpgsql AS $f$
		DECLARE ignored boolean; BEGIN ignored := %[1]s.snoop(); RETURN '"x"'; END $f$;
		CREATE FUNCTION %[1]s.mood_text(v %[1]s.mood) RETURNS text LANGUAGE plpgsql AS $f$
		DECLARE ignored boolean; BEGIN ignored := %[1]s.snoop(); RETURN 'x'; END $f$;`, h.qs(), snoop(h.qs()+".log")))
}

// The fence trigger is SECURITY DEFINER: an operator of the caller's schema, found
// first through the caller's search_path, must never run inside it.
func TestFenceRunsNoCallerOperator(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.log (who text, key_rows bigint);
		CREATE FUNCTION %[1]s.evil_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $f$
		DECLARE ignored boolean; BEGIN ignored := %[1]s.snoop(); RETURN pg_catalog.texteq(a, b); END $f$;
		CREATE FUNCTION %[1]s.snoop() RETURNS boolean LANGUAGE plpgsql AS $f$ %[2]s $f$;
		CREATE OPERATOR %[1]s.= (LEFTARG = text, RIGHTARG = text, FUNCTION = %[1]s.evil_eq);`, s, snoop(s+".log")))
	h.exec(fmt.Sprintf(`SET search_path = %s, pg_catalog`, s))
	h.exec(fmt.Sprintf(`INSERT INTO %s.t (id, body) VALUES ('k1', 'one')`, s))
	h.exec(`RESET search_path`)
	requireOnlyRanAs(t, h.conn, s+".log", h.role)
	var n int
	require.NoError(t, db.Pool.QueryRow(h.ctx, fmt.Sprintf(`SELECT count(*) FROM %s.t WHERE id = 'k1'`, s)).Scan(&n))
	require.Equal(t, 1, n)
}

// The fence measures the text of the row's values (what the decoders render): a cast
// the caller defines from its own type to text must never run inside it. The caller
// owns its enum and so its array type, and may give that a cast to text; the fence
// rendered a registered value of such a type through "::text" when it was stored in
// more than 8 kB, and so ran the caller's cast as the pack's owner (found in the
// twelfth session). The same for a composite column, not registered, and the row's
// own type. The fence now calls each type's output function (only a superuser defines
// one) and renders the row with record_out.
func TestFenceRunsNoCallerCast(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.log (who text, key_rows bigint);
		CREATE TYPE %[1]s.mood AS ENUM ('ok', 'sad');
		CREATE TYPE %[1]s.pair AS (a text, b text);
		CREATE TABLE %[1]s.moods (id int8 PRIMARY KEY, m %[1]s.mood[], hidden %[1]s.pair);
		CREATE FUNCTION %[1]s.snoop() RETURNS boolean LANGUAGE plpgsql AS $f$ %[2]s $f$;
		CREATE FUNCTION %[1]s.moods_text(v %[1]s.mood[]) RETURNS text LANGUAGE plpgsql AS $f$
		DECLARE ignored boolean; BEGIN ignored := %[1]s.snoop(); RETURN 'x'; END $f$;
		CREATE CAST (%[1]s.mood[] AS text) WITH FUNCTION %[1]s.moods_text(%[1]s.mood[]);
		CREATE FUNCTION %[1]s.pair_text(v %[1]s.pair) RETURNS text LANGUAGE plpgsql AS $f$
		DECLARE ignored boolean; BEGIN ignored := %[1]s.snoop(); RETURN 'x'; END $f$;
		CREATE CAST (%[1]s.pair AS text) WITH FUNCTION %[1]s.pair_text(%[1]s.pair);
		CREATE FUNCTION %[1]s.row_text(v %[1]s.moods) RETURNS text LANGUAGE plpgsql AS $f$
		DECLARE ignored boolean; BEGIN ignored := %[1]s.snoop(); RETURN 'x'; END $f$;
		CREATE CAST (%[1]s.moods AS text) WITH FUNCTION %[1]s.row_text(%[1]s.moods);`, s, snoop(s+".log")))
	mustExec(t, db, fmt.Sprintf(`
		SELECT synchro.register_table('%[1]s.moods', 'moods', ARRAY['m']::name[]);
		SELECT synchro.activate_registry();`, s))
	// Small and large (stored in more than 8 kB) values, on insert and update.
	big := fmt.Sprintf(`(SELECT array_agg(CASE WHEN random() < 0.5 THEN 'ok' ELSE 'sad' END::%s.mood) FROM generate_series(1, 200000))`, s)
	h.exec(fmt.Sprintf(`INSERT INTO %[1]s.moods VALUES (1, ARRAY['ok']::%[1]s.mood[], ROW('c', 'd'))`, s))
	h.exec(fmt.Sprintf(`INSERT INTO %[1]s.moods VALUES (2, %[2]s, ROW(repeat('c', 10000), 'd'))`, s, big))
	h.exec(fmt.Sprintf(`UPDATE %[1]s.moods SET m = %[2]s WHERE id = 1`, s, big))
	require.Greater(t, countOf(t, db, fmt.Sprintf(`SELECT min(pg_column_size(m)) FROM %s.moods`, s)), 8192)
	requireOnlyRanAs(t, h.conn, s+".log", h.role)
	require.Equal(t, 2, countOf(t, db, fmt.Sprintf(`SELECT count(*) FROM %s.moods`, s)))
}

// The fence's expressions were written for its columns' types when it was generated,
// but PL/pgSQL plans them against the types now, and PostgreSQL finds a cast by type,
// not through search_path. The table's owner changes a registered column to its own
// enum with a cast to json (to_jsonb looks one up) or an implicit cast to text
// (octet_length), or drops the key guard and retypes the key (NEW.id::text): each ran
// its cast as the pack's owner (found by review in the twelfth session). The fence
// checks its columns' types first and refuses the write (0A000, relation drift).
func TestFenceRunsNoCallerCastAfterTypeChange(t *testing.T) {
	for _, tc := range []struct{ name, col, cast, alter string }{
		{"JSONCastOfRegisteredColumn", "doc",
			"CREATE CAST (%[1]s.mood AS json) WITH FUNCTION %[1]s.mood_json(%[1]s.mood)",
			"ALTER TABLE %[1]s.docs ALTER COLUMN doc TYPE %[1]s.mood USING 'ok'"},
		{"ImplicitTextCastOfRegisteredColumn", "body",
			"CREATE CAST (%[1]s.mood AS text) WITH FUNCTION %[1]s.mood_text(%[1]s.mood) AS IMPLICIT",
			"ALTER TABLE %[1]s.docs ALTER COLUMN body TYPE %[1]s.mood USING 'ok'"},
		{"TextCastOfKey", "id",
			"CREATE CAST (%[1]s.mood AS text) WITH FUNCTION %[1]s.mood_text(%[1]s.mood)",
			"DROP TRIGGER synchro_guard_key ON %[1]s.docs; ALTER TABLE %[1]s.docs ALTER COLUMN id TYPE %[1]s.mood USING 'sad'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			h := newHostileApp(t, db, true)
			s := h.qs()
			h.moodKit()
			h.exec(fmt.Sprintf(`
				CREATE TABLE %[1]s.docs (id text PRIMARY KEY, body text, doc json);
				INSERT INTO %[1]s.docs VALUES ('sad', 'b', '{}');`, s))
			mustExec(t, db, fmt.Sprintf(`
				SELECT synchro.register_table('%[1]s.docs', 'docs', ARRAY['body', 'doc']::name[]);
				SELECT synchro.activate_registry();`, s))
			h.exec(fmt.Sprintf(tc.cast+`;
				`+tc.alter+`;`, s))
			for _, stmt := range []string{
				fmt.Sprintf(`INSERT INTO %[1]s.docs (id, %[2]s) VALUES ('ok', 'ok')`, s, map[bool]string{true: "body", false: tc.col}[tc.col == "id"]),
				fmt.Sprintf(`UPDATE %[1]s.docs SET %[2]s = 'ok'`, s, tc.col),
				fmt.Sprintf(`DELETE FROM %[1]s.docs`, s),
			} {
				if tc.col == "id" && strings.HasPrefix(stmt, "UPDATE") {
					continue // a key change: refused before the fence anyway
				}
				_, err := h.conn.Exec(h.ctx, stmt)
				var pe *pgconn.PgError
				if tc.col != "id" && strings.HasPrefix(stmt, "DELETE") {
					require.NoError(t, err, "a delete reads only the key: %s", stmt)
					continue
				}
				require.ErrorAs(t, err, &pe, stmt)
				require.Equal(t, "0A000", pe.Code, "%s: %s", stmt, pe.Message)
				require.Contains(t, pe.Message, "changed type")
			}
			requireOnlyRanAs(t, h.conn, s+".log", h.role)

			// Every install regenerates the fence, from the columns as they are then: it
			// must not start trusting a retyped key (a review found it did, and ran the
			// key's cast as the owner). A retyped registered column's expressions are
			// generated for its new type, so no cast of it runs either.
			require.NoError(t, synchro.Install(h.ctx, db.SQL))
			_, err := h.conn.Exec(h.ctx, fmt.Sprintf(`INSERT INTO %[1]s.docs (id, body) VALUES ('ok', 'ok')`, s))
			if tc.col == "id" {
				var pe *pgconn.PgError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, "0A000", pe.Code, pe.Message)
			}
			_, _ = h.conn.Exec(h.ctx, fmt.Sprintf(`UPDATE %[1]s.docs SET body = 'ok'`, s))
			_, _ = h.conn.Exec(h.ctx, fmt.Sprintf(`DELETE FROM %[1]s.docs`, s))
			requireOnlyRanAs(t, h.conn, s+".log", h.role)
		})
	}
}

// The same through a rename: the owner renames the registered key and adds a column of
// its own enum, with a cast to text, under the key's name. The install must still
// succeed (a lookup of the key by name failed it, found by review), and the fence must
// refuse every write without running the cast.
func TestFenceRunsNoCallerCastAfterKeyReplaced(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.moodKit()
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.docs (id int8 PRIMARY KEY, body text);
		INSERT INTO %[1]s.docs VALUES (1, 'b');`, s))
	mustExec(t, db, fmt.Sprintf(`
		SELECT synchro.register_table('%[1]s.docs', 'docs');
		SELECT synchro.activate_registry();`, s))
	h.exec(fmt.Sprintf(`
		CREATE CAST (%[1]s.mood AS text) WITH FUNCTION %[1]s.mood_text(%[1]s.mood);
		ALTER TABLE %[1]s.docs RENAME COLUMN id TO real_id;
		ALTER TABLE %[1]s.docs ADD COLUMN id %[1]s.mood DEFAULT 'ok';`, s))
	require.NoError(t, synchro.Install(h.ctx, db.SQL))
	for _, stmt := range []string{
		`INSERT INTO %[1]s.docs (real_id, body) VALUES (2, 'x')`,
		`UPDATE %[1]s.docs SET body = 'y'`,
		`DELETE FROM %[1]s.docs`,
	} {
		_, err := h.conn.Exec(h.ctx, fmt.Sprintf(stmt, s))
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, stmt)
		require.Equal(t, "0A000", pe.Code, "%s: %s", stmt, pe.Message)
	}
	requireOnlyRanAs(t, h.conn, s+".log", h.role)
}

// The first-start baseline reads the live tables as the owner, with SQL written for the
// registered types (t.key::text, to_jsonb of a json column). A registered json column
// retyped to the owner's composite, whose enum field has a cast to json, ran that cast
// as the owner (found by review). The baseline is refused (0A000, relation drift).
func TestBaselineRunsNoCallerCastAfterTypeChange(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.moodKit()
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.docs (id text PRIMARY KEY, doc json);
		INSERT INTO %[1]s.docs VALUES ('a', '{}');`, s))
	mustExec(t, db, fmt.Sprintf(`
		SELECT synchro.register_table('%[1]s.docs', 'docs');
		SELECT synchro.activate_registry();`, s))
	h.exec(fmt.Sprintf(`
		CREATE TYPE %[1]s.pair AS (m %[1]s.mood, t text);
		CREATE CAST (%[1]s.mood AS json) WITH FUNCTION %[1]s.mood_json(%[1]s.mood);
		DROP TRIGGER synchro_fence_update ON %[1]s.docs;
		ALTER TABLE %[1]s.docs ALTER COLUMN doc TYPE %[1]s.pair USING ROW('ok', 'x');`, s))
	tx, err := db.Pool.BeginTx(h.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(h.ctx, `SELECT synchro.runner_baseline('s1', 'pgoutput', '0/1')`)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "0A000", pe.Code, pe.Message)
	require.NoError(t, tx.Rollback(h.ctx))
	requireOnlyRanAs(t, db.Pool, s+".log", h.role)
}

// The fence's full check reads the registered table by its registered name with the
// owner's rights. An application that owns the table renamed it and made a view of
// that name whose WHERE calls its own function: two changes of one row in one
// transaction (the second takes the full check) ran that function as the owner (found
// by review). A write to a renamed registered table is now refused at the source
// (0A000, relation drift), on the first fence of a row too.
func TestFenceRefusesRenamedRelation(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.moodKit()
	h.exec(fmt.Sprintf(`
		ALTER TABLE %[1]s.t RENAME TO t_real;
		CREATE VIEW %[1]s.t AS SELECT id, xmin, cmin FROM %[1]s.t_real WHERE %[1]s.snoop();`, s))
	for _, stmt := range []string{
		fmt.Sprintf(`UPDATE %[1]s.t_real SET body = 'x' WHERE id = 'seed'`, s),
		fmt.Sprintf(`BEGIN; UPDATE %[1]s.t_real SET body = 'x' WHERE id = 'seed';
			UPDATE %[1]s.t_real SET body = 'y' WHERE id = 'seed'; COMMIT`, s),
		fmt.Sprintf(`INSERT INTO %[1]s.t_real VALUES ('new', 'n')`, s),
		fmt.Sprintf(`DELETE FROM %[1]s.t_real WHERE id = 'seed'`, s),
	} {
		_, err := h.conn.Exec(h.ctx, stmt)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, stmt)
		require.Equal(t, "0A000", pe.Code, "%s: %s", stmt, pe.Message)
		require.Contains(t, pe.Message, "relation drift")
		_, _ = h.conn.Exec(h.ctx, `ROLLBACK`)
	}
	requireOnlyRanAs(t, h.conn, s+".log", h.role)
	// Moved to another schema: the same.
	moved := s[:len(s)-1] + `_b"`
	mustExec(t, db, `CREATE SCHEMA `+moved+` AUTHORIZATION `+h.ident)
	h.exec(fmt.Sprintf(`DROP VIEW %[1]s.t; ALTER TABLE %[1]s.t_real RENAME TO t;
		ALTER TABLE %[1]s.t SET SCHEMA %[2]s`, s, moved))
	_, err := h.conn.Exec(h.ctx, fmt.Sprintf(`UPDATE %s.t SET body = 'x'`, moved))
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "0A000", pe.Code, pe.Message)
}

// The baselines (first start, reset, projection bootstrap) read registered tables by
// their registered names with the owner's rights, after synchro._live_shape_check
// checked the relation by OID. A renamed table's old name made a view of the
// application ran its function as the owner. The baseline is refused (0A000, relation
// drift).
func TestBaselineRefusesRenamedRelation(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.moodKit()
	h.exec(fmt.Sprintf(`
		ALTER TABLE %[1]s.t RENAME TO t_real;
		CREATE VIEW %[1]s.t AS SELECT * FROM %[1]s.t_real WHERE %[1]s.snoop();`, s))
	tx, err := db.Pool.BeginTx(h.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(h.ctx, `SELECT synchro.runner_baseline('s1', 'pgoutput', '0/1')`)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "0A000", pe.Code, pe.Message)
	require.Contains(t, pe.Message, "relation drift")
	require.NoError(t, tx.Rollback(h.ctx))
	requireOnlyRanAs(t, db.Pool, s+".log", h.role)
}

// A role without a schema of its own uses its TEMP privilege: a domain pg_temp.text
// whose CHECK calls its own pg_temp function, found first through search_path.
func TestFenceRunsNoCallerTempType(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE public.shared (id text PRIMARY KEY, body text);
		SELECT synchro.register_table('public.shared', 'shared');
		SELECT synchro.activate_registry();`)
	h := newHostileApp(t, db, false)
	mustExec(t, db, `GRANT SELECT, INSERT ON public.shared TO `+h.ident)
	h.exec(fmt.Sprintf(`
		CREATE TEMP TABLE log (who text, key_rows bigint);
		CREATE FUNCTION pg_temp.snoop(v pg_catalog.text) RETURNS boolean LANGUAGE plpgsql AS $f$ %s $f$;
		CREATE DOMAIN pg_temp.text AS pg_catalog.text CHECK (pg_temp.snoop(VALUE));`, snoop("pg_temp.log")))
	h.exec(`SET search_path = pg_temp, pg_catalog, public`)
	h.exec(`INSERT INTO public.shared (id, body) VALUES ('k1', 'one')`)
	h.exec(`RESET search_path`)
	requireOnlyRanAs(t, h.conn, "pg_temp.log", h.role)
}

// The scope authorizer runs inside SECURITY DEFINER pull and rebuild: it must never run
// with the pack owner's rights.
func TestScopeAuthorizerRunsWithoutOwnerRights(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	mustExec(t, db, `
		CREATE TABLE public.authz_log (who text, key_rows bigint);
		GRANT INSERT ON public.authz_log TO PUBLIC;
		CREATE FUNCTION public.peek(client_id text, scope text) RETURNS boolean LANGUAGE plpgsql AS $f$`+
		snoop("public.authz_log")+` $f$;
		CREATE FUNCTION public.peek_definer(client_id text, scope text) RETURNS boolean LANGUAGE plpgsql
		  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$`+snoop("public.authz_log")+` $f$;
		CREATE FUNCTION public.peek_unpinned(client_id text, scope text) RETURNS boolean LANGUAGE plpgsql
		  SECURITY DEFINER AS $f$`+snoop("public.authz_log")+` $f$;
		ALTER FUNCTION public.peek_unpinned(text, text) OWNER TO synchro_operator;`)

	set := func(fn string) error {
		_, err := db.Pool.Exec(h.ctx, `SELECT synchro.set_scope_authorizer($1::regprocedure)`, fn)
		return err
	}
	pull := func() error {
		_, err := h.conn.Exec(h.ctx, `SELECT synchro.pull('c1', 'user:a', NULL)`)
		return err
	}

	// A SECURITY INVOKER function would run as the pack's owner.
	requireSQLState(t, set("public.peek(text, text)"), "SY400")
	// A SECURITY DEFINER function owned by a superuser (here the pack's owner) too.
	requireSQLState(t, set("public.peek_definer(text, text)"), "SY400")
	// Without a pinned search_path its owner's rights are open to the caller's objects.
	requireSQLState(t, set("public.peek_unpinned(text, text)"), "SY400")
	// Owned by a role that can read synchro's tables.
	mustExec(t, db, `
		CREATE ROLE `+h.ident[:len(h.ident)-1]+`_reader" IN ROLE pg_read_all_data;
		CREATE FUNCTION public.peek_reader(client_id text, scope text) RETURNS boolean LANGUAGE plpgsql
		  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$`+snoop("public.authz_log")+` $f$;
		ALTER FUNCTION public.peek_reader(text, text) OWNER TO `+h.ident[:len(h.ident)-1]+`_reader";`)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `DROP FUNCTION public.peek_reader(text, text); DROP ROLE `+h.ident[:len(h.ident)-1]+`_reader"`)
	})
	requireSQLState(t, set("public.peek_reader(text, text)"), "SY400")
	requireOnlyRanAs(t, db.Pool, "public.authz_log", "nobody")

	// Owned by the application role, SECURITY DEFINER, pinned: accepted; it runs as
	// its owner and cannot read the server key.
	h.exec(fmt.Sprintf(`
		CREATE FUNCTION %[1]s.authz(client_id text, scope text) RETURNS boolean LANGUAGE plpgsql
		  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$ %[2]s $f$;`, s, snoopNotice))
	require.NoError(t, set(s+".authz(text, text)"))
	h.takeNotices()
	requireSQLState(t, pull(), "SY409") // authorized, then no cursor
	require.Equal(t, []string{"snoop who=" + h.role + " key_rows=denied"}, h.takeNotices(),
		"the authorizer ran once, as its owner, without the server key")

	// Its owner turns it into SECURITY INVOKER after it was set: pull and rebuild fail
	// closed without running it.
	h.exec(fmt.Sprintf(`ALTER FUNCTION %s.authz(text, text) SECURITY INVOKER`, s))
	requireSQLState(t, pull(), "SY403")
	_, err := h.conn.Exec(h.ctx, `SELECT synchro.rebuild('c1', 'user:a')`)
	requireSQLState(t, err, "SY403")
	require.Empty(t, h.takeNotices(), "the altered authorizer did not run")

	// Or gives it to a superuser.
	h.exec(fmt.Sprintf(`ALTER FUNCTION %s.authz(text, text) SECURITY DEFINER`, s))
	requireSQLState(t, pull(), "SY409")
	require.Len(t, h.takeNotices(), 1)
	mustExec(t, db, fmt.Sprintf(`ALTER FUNCTION %s.authz(text, text) OWNER TO CURRENT_USER`, s))
	requireSQLState(t, pull(), "SY403")
	require.Empty(t, h.takeNotices())
}

// An authorizer's owner must not be able to write the pack's tables either (a grant,
// pg_write_all_data, UPDATE on a pack sequence), nor hold rights that amount to the pack
// owner's (CREATEROLE, the server's program and file roles), nor be a member of the
// runner's role (docs/security.md, "Writing a scope authorizer",
// rule 4). Found by review 2026-12-05: an owner in pg_write_all_data was accepted, and
// one call of its body deleted the setting naming the authorizer: every scope open.
// The rules hold again before every call.
func TestScopeAuthorizerOwnerThatCanWriteThePack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	suffix := randomSuffix()
	owners := map[string]string{
		"write_all":  `IN ROLE pg_write_all_data`,
		"grant":      ``,
		"sequence":   ``,
		"createrole": `CREATEROLE`,
		"program":    `IN ROLE pg_execute_server_program`,
		"files":      `IN ROLE pg_write_server_files`,
		"runner":     `IN ROLE synchro_runner`,
		"plain":      ``,
	}
	for name, opts := range owners {
		role := pgx.Identifier{"authz_" + name + "_" + suffix}.Sanitize()
		fn := "public.authz_" + name + "_" + suffix
		mustExec(t, db, `CREATE ROLE `+role+` NOLOGIN `+opts+`;
			CREATE FUNCTION `+fn+`(client_id text, scope text) RETURNS boolean LANGUAGE plpgsql
			  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
			  BEGIN
			    DELETE FROM synchro.setting; -- a flawed or hostile body
			    RETURN scope = 'user:' || client_id;
			  EXCEPTION WHEN insufficient_privilege THEN
			    RETURN scope = 'user:' || client_id;
			  END $f$;
			ALTER FUNCTION `+fn+`(text, text) OWNER TO `+role)
		t.Cleanup(func() {
			_, _ = db.Pool.Exec(context.Background(), `DROP FUNCTION `+fn+`(text, text); DROP OWNED BY `+role+`; DROP ROLE `+role)
		})
	}
	mustExec(t, db, `GRANT DELETE ON synchro.setting TO `+pgx.Identifier{"authz_grant_" + suffix}.Sanitize())
	mustExec(t, db, `GRANT UPDATE ON SEQUENCE synchro.fence_ordinal TO `+pgx.Identifier{"authz_sequence_" + suffix}.Sanitize())
	set := func(name string) error {
		_, err := db.Pool.Exec(ctx, `SELECT synchro.set_scope_authorizer($1::regprocedure)`,
			"public.authz_"+name+"_"+suffix+"(text, text)")
		return err
	}
	for name := range owners {
		if name == "plain" {
			continue
		}
		requireSQLState(t, set(name), "SY400")
	}

	// A plain owner is accepted (its body's DELETE is refused); given
	// pg_write_all_data afterwards, the authorizer is not called and the scope is
	// refused.
	require.NoError(t, set("plain"))
	pull := func() error {
		_, err := h.conn.Exec(h.ctx, `SELECT synchro.pull('a', 'user:a', NULL)`)
		return err
	}
	requireSQLState(t, pull(), "SY409") // authorized, then no cursor
	mustExec(t, db, `GRANT pg_write_all_data TO `+pgx.Identifier{"authz_plain_" + suffix}.Sanitize())
	requireSQLState(t, pull(), "SY403")
}

// Registration requires that the calling operator may SELECT the relation.
func TestRegistrationRequiresSelect(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	op := "operator_" + randomSuffix()
	ident := pgx.Identifier{op}.Sanitize()
	mustExec(t, db, `CREATE ROLE `+ident+` LOGIN IN ROLE synchro_operator`)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `DROP OWNED BY `+ident)
		_, _ = db.Pool.Exec(context.Background(), `DROP ROLE `+ident)
	})
	mustExec(t, db, `
		CREATE TABLE public.secret (id int8 PRIMARY KEY, body text);
		CREATE TABLE public.secret_dep (id int8 PRIMARY KEY, body text);`)
	asOp := func(sql string) error {
		tx, err := db.Pool.Begin(context.Background())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := tx.Exec(context.Background(), `SET LOCAL ROLE `+ident); err != nil {
			return err
		}
		if _, err := tx.Exec(context.Background(), sql); err != nil {
			return err
		}
		return tx.Commit(context.Background())
	}
	requireSQLState(t, asOp(`SELECT synchro.register_table('public.secret', 'secret')`), "SY400")
	requireSQLState(t, asOp(`SELECT synchro.register_dependency('public.secret_dep')`), "SY400")
	// By OID too (no name lookup in the caller's path).
	requireSQLState(t, asOp(`SELECT synchro.register_table('public.secret'::regclass::oid::regclass, 'secret')`), "SY400")

	// Logged in as the operator itself (no SET ROLE): the session user is checked.
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.User, cfg.Password = op, ""
	if conn, err := pgx.ConnectConfig(context.Background(), cfg); err != nil {
		t.Logf("no direct login as %s (%v): checked through SET ROLE only", op, err)
	} else {
		_, err = conn.Exec(context.Background(), `SELECT synchro.register_table('public.secret', 'secret')`)
		requireSQLState(t, err, "SY400")
		require.NoError(t, conn.Close(context.Background()))
	}

	mustExec(t, db, `GRANT SELECT ON public.secret, public.secret_dep TO `+ident)
	require.NoError(t, asOp(`SELECT synchro.register_table('public.secret', 'secret')`))
	require.NoError(t, asOp(`SELECT synchro.register_dependency('public.secret_dep')`))
}

// pushHelperEnv: a hostile application role with its own registered table, and a
// registered table of someone else on which it has no privilege at all.
func pushHelperEnv(t *testing.T) (*hostileApp, int64, int64) {
	t.Helper()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE public.secret (id text PRIMARY KEY, body text);
		INSERT INTO public.secret VALUES ('k1', 'hidden');
		SELECT synchro.register_table('public.secret', 'secret');
		SELECT synchro.activate_registry();
		-- Written after activation: the row has a fence version.
		UPDATE public.secret SET body = 'hidden too' WHERE id = 'k1';`)
	h := newHostileApp(t, db, true)
	var secretRel, appRel int64
	require.NoError(t, db.Pool.QueryRow(h.ctx, `SELECT relation_id FROM synchro.relation WHERE table_id = 'secret'`).Scan(&secretRel))
	require.NoError(t, db.Pool.QueryRow(h.ctx, `SELECT relation_id FROM synchro.relation WHERE table_id = 'app_t'`).Scan(&appRel))
	return h, secretRel, appRel
}

// Private push helpers called directly by the hostile role: no version, lock or
// existence of a row it cannot read.
func TestPushHelpersReadNothingHidden(t *testing.T) {
	t.Parallel()
	h, secretRel, _ := pushHelperEnv(t)
	var version *string
	err := h.conn.QueryRow(h.ctx, `SELECT version FROM synchro._push_enter('c1', gen_random_uuid(), $1, 'k1', true)`, secretRel).Scan(&version)
	requireSQLState(t, err, "42501")
	require.Nil(t, version, "_push_enter returned the version of a row the caller cannot read")
	err = h.conn.QueryRow(h.ctx, `SELECT synchro._push_leave($1, 'k1')`, secretRel).Scan(&version)
	requireSQLState(t, err, "42501")
	require.Nil(t, version, "_push_leave returned the version of a row the caller cannot read")
	// Through the caller's own function, as push calls it (an assignment), too.
	h.exec(fmt.Sprintf(`CREATE FUNCTION %s.fake_push() RETURNS text LANGUAGE plpgsql AS $f$
		DECLARE ent record; BEGIN ent := synchro._push_enter('c1', gen_random_uuid(), %d, 'k1', true); RETURN ent.version; END $f$`,
		h.qs(), secretRel))
	err = h.conn.QueryRow(h.ctx, fmt.Sprintf(`SELECT %s.fake_push()`, h.qs())).Scan(&version)
	requireSQLState(t, err, "42501")

	// No lock: while the hostile transaction is open, the owner can lock the reservation.
	tx, err := h.conn.Begin(h.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, _ = tx.Exec(h.ctx, `SELECT synchro._push_enter('c1', gen_random_uuid(), $1, 'k1', true)`, secretRel)
	otx, err := h.db.Pool.Begin(h.ctx)
	require.NoError(t, err)
	defer func() { _ = otx.Rollback(context.Background()) }()
	_, err = otx.Exec(h.ctx, `SELECT 1 FROM synchro.row_version WHERE relation_id = $1 AND pk = 'k1' FOR UPDATE NOWAIT`, secretRel)
	require.NoError(t, err, "_push_enter locked the reservation of a row the caller cannot read")
	require.NoError(t, otx.Rollback(h.ctx))
	require.NoError(t, tx.Rollback(h.ctx))

	// Push itself neither: a push on the relation without privilege is rejected, and
	// carries no version.
	raw, err := pushRawOn(h.ctx, h.conn, "c1", pushJSON(t, pushIns(pushID(), "secret", "k1", pm{"body": "x"})))
	require.NoError(t, err)
	res := pushParse(t, raw)
	require.Equal(t, "rejected", res[0].str(t, "status"))
	require.Equal(t, "42501", res[0].str(t, "code"))
}

// A plan hash as _push_prepare computes it (through push's own helper, as the caller).
func hostilePlanHash(h *hostileApp, client, mutations string) (string, error) {
	var hash string
	err := h.conn.QueryRow(h.ctx, `SELECT synchro._push_prepare($1, $2::jsonb) -> 0 ->> 'hash'`, client, mutations).Scan(&hash)
	return hash, err
}

// No accepted outcome without the write and its fence in the same transaction.
func TestPushHelpersRecordNoUnwrittenAccept(t *testing.T) {
	t.Parallel()
	h, _, _ := pushHelperEnv(t)
	id := pushID()
	mutation := pushJSON(t, pushIns(id, "app_t", "lost", pm{"body": "must be written"}))
	hash, herr := hostilePlanHash(h, "c1", mutation)
	if herr == nil {
		_, err := h.conn.Exec(h.ctx, `SELECT synchro._push_record('c1', $1::uuid, $2,
			jsonb_build_object('id', $1::text, 'status', 'accepted', 'version', 'forged'))`, id, hash)
		require.Error(t, err, "_push_record stored an accepted outcome for a mutation that never wrote")
	}
	// The real push of that mutation writes the row.
	raw, err := pushRawOn(h.ctx, h.conn, "c1", mutation)
	require.NoError(t, err)
	res := pushParse(t, raw)
	require.Equal(t, "accepted", res[0].str(t, "status"))
	require.NotEqual(t, "forged", res[0].str(t, "version"))
	var n int
	require.NoError(t, h.db.Pool.QueryRow(h.ctx, fmt.Sprintf(`SELECT count(*) FROM %s.t WHERE id = 'lost'`, h.qs())).Scan(&n))
	require.Equal(t, 1, n, "an accepted outcome without its write: silent loss")
}

// Nothing recorded for another transaction: a write and fence committed earlier do not
// let a later transaction record an accepted outcome.
func TestPushHelpersRecordNothingForAnotherTransaction(t *testing.T) {
	t.Parallel()
	h, _, appRel := pushHelperEnv(t)
	id := pushID()
	tx, err := h.conn.Begin(h.ctx)
	require.NoError(t, err)
	if _, err := tx.Exec(h.ctx, `SELECT synchro._push_enter('c1', $1::uuid, $2, 'k5', true)`, id, appRel); err == nil {
		_, err = tx.Exec(h.ctx, fmt.Sprintf(`INSERT INTO %s.t (id, body) VALUES ('k5', 'direct')`, h.qs()))
		require.NoError(t, err)
	}
	_ = tx.Commit(h.ctx)
	var version string
	if err := h.db.Pool.QueryRow(h.ctx, `SELECT version FROM synchro.row_version WHERE relation_id = $1 AND pk = 'k5'`, appRel).Scan(&version); err != nil {
		version = "none"
	}
	hash, herr := hostilePlanHash(h, "c1", pushJSON(t, pushIns(id, "app_t", "k5", pm{"body": "direct"})))
	if herr == nil {
		_, err = h.conn.Exec(h.ctx, `SELECT synchro._push_record('c1', $1::uuid, $2,
			jsonb_build_object('id', $1::text, 'status', 'accepted', 'version', $3::text))`, id, hash, version)
		require.Error(t, err, "_push_record stored an accepted outcome for a write of another transaction")
	}
	var n int
	require.NoError(t, h.db.Pool.QueryRow(h.ctx, `SELECT count(*) FROM synchro.mutation_outcome WHERE mutation_id = $1`, id).Scan(&n))
	require.Zero(t, n)
}

// Push re-defers only the constraints it made immediate: a deferred constraint in a
// schema the caller cannot use must not make every push fail.
func TestPushIgnoresForeignDeferredConstraints(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE SCHEMA hidden;
		CREATE TABLE hidden.a (id int4 PRIMARY KEY);
		CREATE TABLE hidden.b (id int4 PRIMARY KEY, a_id int4 CONSTRAINT b_a_fk REFERENCES hidden.a DEFERRABLE INITIALLY DEFERRED);`)
	h := newHostileApp(t, db, true)
	raw, err := pushRawOn(h.ctx, h.conn, "c1", pushJSON(t, pushIns(pushID(), "app_t", "k1", pm{"body": "one"})))
	require.NoError(t, err)
	require.Equal(t, "accepted", pushParse(t, raw)[0].str(t, "status"))
}

// Advisory-lock keys carry a per-install secret: a role that guesses the fixed key
// cannot block the runner claim or push.
func TestAdvisoryLockKeysAreNotGuessable(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	id := pushID()
	for _, key := range []string{"synchro.runner", "synchro.registry", "c1/" + id} {
		var ok bool
		require.NoError(t, h.conn.QueryRow(h.ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok))
		require.True(t, ok)
	}

	_, err := db.Pool.Exec(h.ctx, `SELECT synchro.runner_claim('test', 1, 'synchro', 'synchro', interval '1 second', 'pgoutput')`)
	require.NoError(t, err, "a guessed advisory-lock key blocked the runner claim")
	_, err = db.Pool.Exec(h.ctx, `SELECT synchro.runner_release()`)
	require.NoError(t, err)

	conn, err := db.Pool.Acquire(h.ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(h.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	// lock_timeout bounds the failure case only; nothing is asserted about time.
	_, err = tx.Exec(h.ctx, `SET LOCAL lock_timeout = '2s'`)
	require.NoError(t, err)
	_, err = pushRawOn(h.ctx, tx, "c1", pushJSON(t, pushIns(id, "app_t", "k1", pm{"body": "one"})))
	require.NoError(t, err, "a guessed advisory-lock key blocked push")
	require.NoError(t, tx.Rollback(h.ctx))

	tx2, err := db.Pool.Begin(h.ctx)
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(context.Background()) }()
	_, err = tx2.Exec(h.ctx, `SET LOCAL lock_timeout = '2s'; CREATE TABLE public.reg (id int4 PRIMARY KEY)`)
	require.NoError(t, err)
	_, err = tx2.Exec(h.ctx, `SELECT synchro.register_table('public.reg', 'reg')`)
	require.NoError(t, err, "a guessed advisory-lock key blocked registration")
}

// Who may use what in schema synchro, for each role the contract names and PUBLIC,
// compared with the explicit list CONTRACT.md (Roles) gives.
func TestPrivilegeBoundary(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	app := []string{
		"synchro.pull(text,text,text,integer)",
		"synchro.push(text,jsonb)",
		"synchro._push_run(text,jsonb,text)",
		"synchro.rebuild(text,text,text,integer)",
		"synchro.readiness()",
		"synchro.ready()",
		// The contract's one allowance: private helpers push must call as the caller:
		// push's body (SECURITY INVOKER), and the four SECURITY DEFINER helpers, each
		// refusing any caller but _push_run and holding the invariants itself.
		"synchro._push_enter(text,uuid,bigint,text,boolean)",
		"synchro._push_leave(bigint,text)",
		"synchro._push_prepare(text,jsonb)",
		"synchro._push_record(text,uuid,text,jsonb)",
	}
	operator := append([]string{
		"synchro.activate_registry()",
		"synchro.add_scope_rule(text,text,name)",
		"synchro.add_scope_rule(text,text,name,regclass,name,name)",
		"synchro.compact(interval)",
		"synchro.compact_all(interval,jsonb)",
		"synchro.retire_client(text)",
		"synchro.register_dependency(regclass,name[])",
		"synchro.register_table(regclass,text,name[])",
		"synchro.retry_poison()",
		"synchro.set_scope_authorizer(regprocedure)",
		"synchro.begin_reset(text)",
		"synchro.reset_status(uuid)",
		"synchro.activate_reset(uuid)",
		"synchro.abort_reset(uuid)",
		// Controlled reconfiguration (docs/bootstrap.md).
		"synchro.set_columns(bigint,name[])",
		"synchro.remove_scope_rules(text)",
		"synchro.unregister_relation(bigint)",
		"synchro.rebind_relation(bigint,regclass)",
		"SELECT synchro.poison",
		"SELECT synchro.registry",
		// Where each projection bootstrap stands (docs/sql/bootstrap_status.md).
		"SELECT synchro.bootstrap_status",
		// Retention: the destructive release of a consumer group, and the groups' lag.
		"synchro.release_consumer_retention(text,text)",
		"SELECT synchro.consumer_groups",
	}, app...)
	consumer := append([]string{
		"synchro.create_consumer_group(text,text,text[])",
		"synchro.acquire_lease(text,text,integer)",
		"synchro.read_changes(text,bigint,integer,integer)",
		"synchro.ack(text,bigint,text)",
		"synchro.release_lease(text,bigint)",
		"synchro.remove_consumer_group(text,text)",
		"SELECT synchro.consumer_groups",
	}, app...)
	runner := []string{
		"synchro.materialize_batch(bigint,pg_lsn[],pg_lsn[],bigint[],timestamp with time zone[],boolean)",
		// Pipelined batches (runner/apply.go): the two halves of materialize_batch's set-based path.
		"synchro.materialize_prepare(bigint,pg_lsn[],pg_lsn[],bigint[],timestamp with time zone[])",
		"synchro.materialize_write(bigint,bigint,pg_lsn[],pg_lsn[],bigint[],timestamp with time zone[])",
		"synchro.runner_ack(pg_lsn)",
		"synchro.runner_baseline(text,text,pg_lsn)",
		"synchro.runner_bootstrap_begin()",
		"synchro.runner_bootstrap_fail(text)",
		"synchro.runner_bootstrap_stage(pg_lsn,text)",
		"synchro.runner_bootstrap_versions(bigint,text,integer)",
		"synchro.runner_claim(text,integer,text,text,interval,text)",
		"synchro.runner_columns(bigint,bigint)",
		"synchro.runner_heartbeat(pg_lsn,text)",
		"synchro.runner_idle(pg_lsn)",
		"synchro.runner_message_key()",
		"synchro.runner_pack_version()",
		"synchro.runner_poison(bigint,pg_lsn,text,bigint,bigint)",
		"synchro.runner_release()",
		"synchro.runner_reset_baseline(uuid,text,pg_lsn)",
		"synchro.runner_reset_candidate(uuid,text)",
		"synchro.runner_reset_cleaned(uuid)",
		"synchro.runner_reset_fail(uuid,text)",
		"synchro.runner_reset_index(uuid,integer)",
		"synchro.runner_reset_mark(uuid)",
		"synchro.runner_reset_materialize(uuid,pg_lsn[],pg_lsn[],bigint[],timestamp with time zone[],boolean)",
		"synchro.runner_reset_ready(uuid)",
		"synchro.runner_reset_state()",
		"synchro.runner_reset_verify(uuid,integer)",
		"synchro.runner_reset_versions(uuid,bigint,text,integer)",
		"synchro.runner_stage_open()",
		"synchro.runner_state()",
		"synchro.runner_table_set()",
		// Each consumer group's lag in /metrics.
		"SELECT synchro.consumer_groups",
		// The sidecar answers /readyz from synchro.ready() on its own login.
		"synchro.readiness()",
		"synchro.ready()",
	}

	for _, tc := range []struct {
		role string
		want []string
	}{
		{"synchro_app", app},
		{"synchro_operator", operator},
		{"synchro_consumer", consumer},
		{"synchro_runner", runner},
		{"public", nil},
	} {
		t.Run(tc.role, func(t *testing.T) {
			rows, err := db.Pool.Query(ctx, `
				SELECT p.oid::regprocedure::text
				  FROM pg_proc p
				 WHERE p.pronamespace = 'synchro'::regnamespace
				   AND has_function_privilege($1, p.oid, 'EXECUTE')
				UNION ALL
				SELECT priv || ' ' || c.oid::regclass::text
				  FROM pg_class c
				 CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) priv
				 WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
				   AND has_table_privilege($1, c.oid, priv)
				UNION ALL
				SELECT priv || ' ' || c.oid::regclass::text
				  FROM pg_class c
				 CROSS JOIN unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) priv
				 WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind = 'S'
				   AND has_sequence_privilege($1, c.oid, priv)`, tc.role)
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if got == nil {
				got = []string{}
			}
			require.NoError(t, err)

			// Names the contract lists that do not exist yet are left out.
			want := []string{}
			for _, w := range tc.want {
				var exists bool
				if name, ok := strings.CutPrefix(w, "SELECT "); ok {
					require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists))
				} else {
					require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_regprocedure($1) IS NOT NULL`, w).Scan(&exists))
				}
				if exists {
					want = append(want, w)
				}
			}
			sort.Strings(got)
			sort.Strings(want)
			wantJSON, _ := json.MarshalIndent(want, "", "  ")
			gotJSON, _ := json.MarshalIndent(got, "", "  ")
			require.Equal(t, string(wantJSON), string(gotJSON), "what %s may use in schema synchro", tc.role)
		})
	}
}

// Every SECURITY DEFINER function of the pack, generated fences included, pins
// search_path to pg_catalog, pg_temp.
func TestSecurityDefinerPinsSearchPath(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE public.pinned (id int8 PRIMARY KEY, body text);
		CREATE TABLE public.pinned_dep (id text PRIMARY KEY);
		SELECT synchro.register_table('public.pinned', 'pinned');
		SELECT synchro.register_dependency('public.pinned_dep');
		SELECT synchro.activate_registry();`)
	var fences int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_proc WHERE pronamespace = 'synchro'::regnamespace AND proname ~ '^_fence_[0-9]+$' AND prosecdef`).Scan(&fences))
	require.Equal(t, 2, fences)
	rows, err := db.Pool.Query(context.Background(), `
		SELECT p.oid::regprocedure::text FROM pg_proc p
		 WHERE p.pronamespace = 'synchro'::regnamespace AND p.prosecdef
		   AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
		 ORDER BY 1`)
	require.NoError(t, err)
	unpinned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, unpinned, "SECURITY DEFINER functions without SET search_path = pg_catalog, pg_temp")
}

// A key column of a type that is merely named like a supported one (a domain app.text
// over text, whose CHECK the application owns) is refused: key types are pg_catalog's.
func TestRegistrationRefusesLookalikeKeyType(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE SCHEMA lookalike;
		CREATE DOMAIN lookalike.text AS pg_catalog.text CHECK (VALUE <> '');
		CREATE TABLE lookalike.t (id lookalike.text PRIMARY KEY, body pg_catalog.text);`)
	_, err := db.Pool.Exec(context.Background(), `SELECT synchro.register_table('lookalike.t', 'lookalike')`)
	pgErr := requireSQLState(t, err, "SY400")
	require.Contains(t, pgErr.Message, "primary key type")
}

// A runner session that made its own temporary synchro_ tables (with triggers that
// would run as the owner when materialization writes them) is refused.
func TestRunnerStageRefusesSessionTables(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	conn, ident := runnerSession(t, db)
	_, err := conn.Exec(ctx, `CREATE TEMP TABLE synchro_stage (seq int)`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT synchro.runner_stage_open()`)
	requireSQLState(t, err, "42501")

	// A clean session gets the owner's tables, and may call it again.
	conn2, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn2.Close(ctx)
	_, err = conn2.Exec(ctx, `SET ROLE `+ident)
	require.NoError(t, err)
	for range 2 {
		_, err = conn2.Exec(ctx, `SELECT synchro.runner_stage_open()`)
		require.NoError(t, err)
	}
	// The runner stages rows, but cannot declare a Relation shape checked: the
	// session's memory of checked shapes is the owner's alone.
	_, err = conn2.Exec(ctx, `INSERT INTO pg_temp.synchro_rel_ok VALUES (1, 1, 'public', 'items', 'd', '{id}', '{20}', '{t}')`)
	requireSQLState(t, err, "42501")

	// A session that opened its tables before an upgrade added synchro_rel_ok gets it
	// at its next call; one that made its own is refused.
	conn3, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn3.Close(ctx)
	_, err = conn3.Exec(ctx, `SELECT synchro.runner_stage_open(); DROP TABLE pg_temp.synchro_rel_ok`)
	require.NoError(t, err)
	_, err = conn3.Exec(ctx, `SELECT synchro.runner_stage_open()`)
	require.NoError(t, err)
	require.NoError(t, conn3.QueryRow(ctx, `SELECT count(*) FROM pg_temp.synchro_rel_ok`).Scan(new(int)))
	_, err = conn3.Exec(ctx, `DROP TABLE pg_temp.synchro_rel_ok; SET ROLE `+ident+`;
		CREATE TEMP TABLE synchro_rel_ok (generation bigint)`)
	require.NoError(t, err)
	_, err = conn3.Exec(ctx, `SELECT synchro.runner_stage_open()`)
	requireSQLState(t, err, "42501")
}

// A runner session can drop every temporary object it holds, the owner's work tables
// included (DISCARD TEMP), and make synchro_ tables of its own with triggers:
// materialize_batch checks the session's tables on every call, so such a trigger never
// runs with the owner's rights (42501, nothing run). Red before the check: the trigger
// ran as the owner on the first work-table insert.
func TestMaterializeBatchRefusesDiscardedStage(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	rr := startRunner(t, testRunnerConfig(t, db))
	p := waitStream(t, db)
	require.NoError(t, rr.stop(t))
	ctx := context.Background()
	conn, _ := runnerSession(t, db)
	_, err := conn.Exec(ctx, `SELECT synchro.runner_stage_open();
		DISCARD TEMP;
		CREATE FUNCTION pg_temp.trg() RETURNS trigger LANGUAGE plpgsql
		  AS $f$ BEGIN RAISE EXCEPTION 'trigger ran as %', current_user; END $f$;
		CREATE TEMP TABLE synchro_stage (txn int, seq int, kind "char", event_ordinal int, relid oid, nspname text,
		  relname text, replident "char", col_names text[], col_types oid[], col_keys boolean[], new_row jsonb,
		  old_row jsonb, toast text[], truncated oid[], prefix text, f_kind text, f_relation_id bigint, f_schema text,
		  f_table text, f_op text, f_old_key text, f_new_key text, f_version text, f_fence_id uuid, f_ordinal bigint,
		  f_table_id text, a_generation bigint, a_previous bigint);
		CREATE TEMP TABLE synchro_b_txn (t int PRIMARY KEY, commit_lsn pg_lsn, end_lsn pg_lsn, xid bigint,
		  commit_time timestamptz, n_events int, n_fences int);
		CREATE TRIGGER t BEFORE INSERT OR DELETE ON synchro_b_txn FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.trg();
		CREATE TRIGGER t BEFORE INSERT OR DELETE ON synchro_stage FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.trg()`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT synchro.materialize_batch($1, ARRAY['FF/1']::pg_lsn[], ARRAY['FF/2']::pg_lsn[],
		ARRAY[1::bigint], ARRAY[now()], true)`, p.Generation)
	requireSQLState(t, err, "42501")
}

// runnerSession creates a login role in synchro_runner for the test and returns a
// session of its own under that role (SET ROLE), and the role's quoted name.
func runnerSession(t *testing.T, db *testdb.DB) (*pgx.Conn, string) {
	t.Helper()
	ctx := context.Background()
	ident := pgx.Identifier{"runner_" + randomSuffix()}.Sanitize()
	mustExec(t, db, `CREATE ROLE `+ident+` LOGIN IN ROLE synchro_runner`)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `DROP OWNED BY `+ident)
		_, _ = db.Pool.Exec(context.Background(), `DROP ROLE `+ident)
	})
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `SET ROLE `+ident)
	require.NoError(t, err)
	return conn, ident
}

// synchro._mat_links_fn keeps each relation's links statement in a function of the
// session's temporary schema, so that its plan is kept. The runner's role may create
// temporary functions too: one it made under that name and signature first is never
// called with the owner's rights (the run falls back, SYB01); in a clean session the
// function is the owner's, created once and reused.
func TestMaterializeRefusesSessionFunction(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	conn, _ := runnerSession(t, db)
	_, err := conn.Exec(ctx, `SELECT synchro.runner_stage_open();
		CREATE TEMP TABLE hit (who text);
		CREATE FUNCTION pg_temp.synchro_links_7_3_3(rid bigint, OUT more boolean, OUT gone boolean, OUT known boolean)
		LANGUAGE plpgsql AS $f$ BEGIN INSERT INTO pg_temp.hit VALUES (current_user); more := false; gone := false; known := false; END $f$;
		RESET ROLE`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT synchro._mat_links_fn(7, 3)`)
	requireSQLState(t, err, "SYB01")
	var hits int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_temp.hit`).Scan(&hits))
	require.Zero(t, hits, "the session's own function never ran")

	// An overload the session made (another signature) is refused too: the call could
	// become ambiguous, or pick it.
	other, _ := runnerSession(t, db)
	_, err = other.Exec(ctx, `SELECT synchro.runner_stage_open();
		CREATE FUNCTION pg_temp.synchro_links_7_3_3(rid int, OUT more boolean, OUT gone boolean, OUT known boolean)
		LANGUAGE plpgsql AS $f$ BEGIN more := false; gone := false; known := false; END $f$;
		RESET ROLE`)
	require.NoError(t, err)
	_, err = other.Exec(ctx, `SELECT synchro._mat_links_fn(7, 3)`)
	requireSQLState(t, err, "SYB01")

	clean, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer clean.Close(ctx)
	_, err = clean.Exec(ctx, `SELECT synchro.runner_stage_open()`)
	require.NoError(t, err)
	var first, second string
	require.NoError(t, clean.QueryRow(ctx, `SELECT synchro._mat_links_fn(7, 3)`).Scan(&first))
	require.NoError(t, clean.QueryRow(ctx, `SELECT synchro._mat_links_fn(7, 3)`).Scan(&second))
	require.Equal(t, first, second)
	var n int
	var ownerIsCaller bool
	require.NoError(t, clean.QueryRow(ctx, `SELECT count(*), bool_and(p.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user))
		FROM pg_proc p WHERE p.pronamespace = pg_my_temp_schema() AND p.proname = 'synchro_links_7_3_3'`).Scan(&n, &ownerIsCaller))
	require.Equal(t, 1, n, "created once")
	require.True(t, ownerIsCaller)
}

// Open (issue 13, item 4, materialize.sql and runner_baseline.sql are changed there):
// materialization renders row images with to_jsonb(jsonb_populate_record(NULL::<table>,
// ...)) with the owner's rights, so a cast to json of the application's own enum type
// (or a CHECK of its own domain) runs as the pack owner. Reproduced on this branch;
// remove the skip with the fix.
func TestMaterializeRunsNoCallerCast(t *testing.T) {
	if !materializeCastFixed {
		t.Skip("open: synchro.materialize runs an application cast to json as the owner (docs/security.md, known open paths)")
	}
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.log (who text, key_rows bigint);
		CREATE TYPE %[1]s.mood AS ENUM ('ok', 'sad');
		CREATE TABLE %[1]s.moods (id int8 PRIMARY KEY, m %[1]s.mood);`, s))
	mustExec(t, db, fmt.Sprintf(`
		SELECT synchro.register_table('%[1]s.moods', 'moods');
		SELECT synchro.activate_registry();`, s))
	h.exec(fmt.Sprintf(`
		CREATE FUNCTION %[1]s.snoop() RETURNS boolean LANGUAGE plpgsql AS $f$ %[2]s $f$;
		CREATE FUNCTION %[1]s.mood_json(v %[1]s.mood) RETURNS json LANGUAGE plpgsql AS $f$
		DECLARE ignored boolean; BEGIN ignored := %[1]s.snoop(); RETURN pg_catalog.to_json(v::text); END $f$;
		CREATE CAST (%[1]s.mood AS json) WITH FUNCTION %[1]s.mood_json(%[1]s.mood);`, s, snoop(s+".log")))
	rr := startRunner(t, testRunnerConfig(t, db))
	defer func() { _ = rr.stop(t) }()
	waitStream(t, db)
	h.exec(fmt.Sprintf(`INSERT INTO %s.moods (id, m) VALUES (1, 'sad')`, s))
	eventually(t, 30*time.Second, "the row to be projected", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.projection p JOIN synchro.relation r USING (relation_id) WHERE r.table_id = 'moods'`) == 1
	})
	requireOnlyRanAs(t, db.Pool, s+".log", h.role)
}

// materializeCastFixed turns TestMaterializeRunsNoCallerCast on.
const materializeCastFixed = true

// An operator of the caller's schema, first in its search_path, must never run in push's
// own frame: there, an inlined SQL function could call a push helper as if it were push.
func TestPushFrameRunsNoCallerOperator(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	var appRel int64
	require.NoError(t, db.Pool.QueryRow(h.ctx, `SELECT relation_id FROM synchro.relation WHERE table_id = 'app_t'`).Scan(&appRel))
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.log (what text);
		CREATE FUNCTION %[1]s.note(v text) RETURNS text LANGUAGE plpgsql AS $f$
		BEGIN INSERT INTO %[1]s.log VALUES ('helper answered'); RETURN v; END $f$;
		-- Inlined into the caller's expression: no frame of its own.
		CREATE FUNCTION %[1]s.arrow(j jsonb, k text) RETURNS text LANGUAGE sql AS $f$
		  SELECT coalesce(%[1]s.note(synchro._push_leave(%[2]d, 'seed')), '') || pg_catalog.jsonb_object_field_text(j, k) $f$;
		CREATE OPERATOR %[1]s.->> (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = %[1]s.arrow);`, s, appRel))
	h.exec(fmt.Sprintf(`SET search_path = %s, pg_catalog`, s))
	raw, err := pushRawOn(h.ctx, h.conn, "c1", pushJSON(t, pushIns(pushID(), "app_t", "k1", pm{"body": "one"})))
	h.exec(`RESET search_path`)
	require.NoError(t, err)
	require.Equal(t, "accepted", pushParse(t, raw)[0].str(t, "status"))
	var n int
	require.NoError(t, h.conn.QueryRow(h.ctx, fmt.Sprintf(`SELECT count(*) FROM %s.log`, s)).Scan(&n))
	require.Zero(t, n, "a push helper answered a call from the caller's operator inside push")
}

// No accepted outcome without its fence: the table's owner (the application role)
// disables the fence trigger of its registered table; push records no "accepted" for a
// write that left no fence (it would never reach pull), and the call fails as a whole.
func TestPushRecordsNoAcceptWithoutFence(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	h.exec(fmt.Sprintf(`ALTER TABLE %s.t DISABLE TRIGGER synchro_fence_insert`, h.qs()))
	id := pushID()
	_, err := pushRawOn(h.ctx, h.conn, "c1", pushJSON(t, pushIns(id, "app_t", "nofence", pm{"body": "x"})))
	requireSQLState(t, err, "55000")
	var n int
	require.NoError(t, db.Pool.QueryRow(h.ctx, `SELECT count(*) FROM synchro.mutation_outcome WHERE mutation_id = $1`, id).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, db.Pool.QueryRow(h.ctx, fmt.Sprintf(`SELECT count(*) FROM %s.t WHERE id = 'nofence'`, h.qs())).Scan(&n))
	require.Zero(t, n, "nothing written")
}

// A scope authorizer accepted by set_scope_authorizer (SECURITY DEFINER, pinned
// search_path, owned by the application role, as TestScopeAuthorizerRunsWithoutOwnerRights
// accepts it) runs as its owner, but a plain (session-level) SET inside it overrides the
// SET clauses of the authorizer and of pull/rebuild (PostgreSQL: "an ordinary SET ...
// persists after function exit"). rebuild then continues as the pack owner with the
// application's schema first in search_path: synchro._scope_rule_generation (no SET
// clause) resolved starts_with() to the application's function, run as the owner.
// An authorizer that changes search_path is refused now (SY403), for pull and rebuild.
func TestScopeAuthorizerCannotChangeSearchPath(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	mustExec(t, db, `SELECT synchro.add_scope_rule('app_t', 'user:', 'body'); SELECT synchro.activate_registry();`)
	h.exec(fmt.Sprintf(`
		CREATE FUNCTION %[1]s.starts_with(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $f$
		DECLARE n bigint;
		BEGIN
		  BEGIN
		    SELECT pg_catalog.count(*) INTO n FROM synchro.server_key;
		  EXCEPTION WHEN insufficient_privilege THEN
		    n := NULL;
		  END;
		  RAISE NOTICE 'snoop who=%% key_rows=%%', current_user, coalesce(n::pg_catalog.text, 'denied');
		  RETURN pg_catalog.starts_with(a, b);
		END $f$;
		CREATE FUNCTION %[1]s.authz(client_id text, scope text) RETURNS boolean LANGUAGE plpgsql
		  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
		BEGIN
		  PERFORM pg_catalog.set_config('search_path', %[2]s || ', pg_catalog', false);
		  RETURN true;
		END $f$;`, s, "'"+strings.ReplaceAll(s, "'", "''")+"'"))
	_, err := db.Pool.Exec(h.ctx, `SELECT synchro.set_scope_authorizer($1::regprocedure)`, s+".authz(text, text)")
	require.NoError(t, err, "the authorizer meets every rule of set_scope_authorizer")

	for _, call := range []string{`SELECT synchro.rebuild('c1', 'user:a')`,
		`SELECT synchro.pull('c1', 'user:a', (SELECT synchro.rebuild('c2', 'user:a') ->> 'cursor'))`} {
		h.takeNotices()
		_, err := h.conn.Exec(h.ctx, call)
		notices := h.takeNotices()
		requireSQLState(t, err, "SY403")
		require.Contains(t, err.Error(), "search_path")
		for _, n := range notices {
			require.Equal(t, "snoop who="+h.role+" key_rows=denied", n,
				"the application's function ran inside %s with the pack owner's rights", call)
		}
	}
}
