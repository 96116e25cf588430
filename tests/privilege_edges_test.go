package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/tests/testdb"
)

// From an independent privilege review, second round, 2026-12-04 (docs/security.md,
// CONTRACT.md "Roles").
// The attacker is newHostileApp's role: a login in synchro_app that owns its schema and
// the registered table in it. Every test either shows a path by which that role's code
// runs with the pack owner's rights (each red until fixed; "Was a bug") or keeps an
// attack that failed.
//
// Detection: the application's function reports, as a notice to the session that runs
// it, current_user and whether that role can read synchro.server_key
// (snoopNotice's body). Every notice must say the application's own role and "denied".

// salted is snoopNotice's body for a function returning text.
var salted = strings.Replace(snoopNotice, "RETURN true;", "RETURN 'x';", 1)

// privilegeKit creates, in the hostile role's schema, salt(): an IMMUTABLE function
// without arguments that snoops (a notice) and returns 'x'. PostgreSQL accepts
// IMMUTABLE on any function its owner writes; the label only lets the planner call it
// early (constant folding).
func privilegeKit(h *hostileApp) {
	h.t.Helper()
	h.exec(fmt.Sprintf(`CREATE FUNCTION %[1]s.salt() RETURNS text LANGUAGE plpgsql IMMUTABLE AS $f$ %[2]s $f$`, h.qs(), salted))
}

// noticeConn is a new session of the test's superuser (the pack owner's role here)
// that collects the notices it receives.
type noticeConn struct {
	conn    *pgx.Conn
	mu      sync.Mutex
	notices []string
}

func newNoticeConn(t *testing.T, db *testdb.DB) *noticeConn {
	t.Helper()
	nc := &noticeConn{}
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		nc.mu.Lock()
		defer nc.mu.Unlock()
		nc.notices = append(nc.notices, n.Message)
	}
	nc.conn, err = pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.conn.Close(context.Background()) })
	return nc
}

func (nc *noticeConn) take() []string {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	n := nc.notices
	nc.notices = nil
	return n
}

// requireSnoopsAsApp requires that every snoop notice says the application's role,
// without the server key.
func requireSnoopsAsApp(t *testing.T, h *hostileApp, notices []string, where string) {
	t.Helper()
	for _, n := range notices {
		if !strings.HasPrefix(n, "snoop ") {
			continue
		}
		require.Equal(t, "snoop who="+h.role+" key_rows=denied", n,
			"%s: the application's function ran with the pack owner's rights (and read synchro.server_key)", where)
	}
}

// Was a bug (fixed). The fence (SECURITY DEFINER, owned by the pack owner) plans its full
// check, "... LEFT JOIN ONLY <schema>.<table> t ON t.<key> = k", with the owner's
// rights inside the writer's statement. Planning a query on a table runs parts of the
// table's definition through eval_const_expressions, which calls an IMMUTABLE
// function whose arguments are all constants:
//   - its extended statistics' expressions, on every planning (plancat.c,
//     get_relation_statistics): CREATE STATISTICS s ON (body || app.salt()) FROM app.t;
//   - its CHECK constraints, when the writer's session sets constraint_exclusion = on
//     (any role may; get_relation_constraints): the fence pins search_path and four
//     rendering settings, not the planner's.
//
// The table's owner (the application) may define both on its own table. Any write
// that takes the full check (a second change of a row in one transaction, a write from
// a function, trigger or DO block, and every push) then runs the application's function
// as the pack owner (a superuser in the documented install). Here it copies
// synchro.server_key into the application's own table (the key that authenticates
// cursors, rebuild tokens and every fence message); it could as well ALTER ROLE itself
// SUPERUSER from the VOLATILE function it calls.
// Rule broken: "nothing a caller defines runs with the owner's rights" (expressions of
// registered tables evaluated inside definer code). Fixed by the refusal (synchro._planned_app_code, in the fence's full check,
// activation and the baselines under a lock that keeps CREATE STATISTICS and CREATE
// INDEX out) and constraint_exclusion pinned. The review suggested: never let the pack
// owner plan a query on an application table: do the live-tuple probe (and the
// baselines' and activation's reads, below) as a dedicated NOLOGIN role that holds
// nothing but SELECT on the registered tables (the scope authorizer's rules), or
// refuse (0A000) a registered table whose statistics, index expressions or predicates,
// or CHECK constraints call a function outside pg_catalog, checked under a lock that
// keeps CREATE STATISTICS / CREATE INDEX out, and pin constraint_exclusion in the
// fence's SET clauses.
func TestPrivilegeEdgeFenceRunsNoPlannerFoldedFunction(t *testing.T) {
	for _, tc := range []struct{ name, trap, session string }{
		{"StatisticsExpression",
			`CREATE STATISTICS %[1]s.st ON (body || %[1]s.salt()) FROM %[1]s.t;
			 CREATE STATISTICS %[1]s.st2 ON (body || %[1]s.loot()) FROM %[1]s.t;`, ``},
		{"CheckConstraintUnderConstraintExclusion",
			`ALTER TABLE %[1]s.t ADD CONSTRAINT salted CHECK (body || %[1]s.salt() IS NOT NULL);
			 ALTER TABLE %[1]s.t ADD CONSTRAINT looted CHECK (body || %[1]s.loot() IS NOT NULL);`,
			`SET constraint_exclusion = on`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			h := newHostileApp(t, db, true)
			s := h.qs()
			privilegeKit(h)
			// loot(): IMMUTABLE, so the planner folds it; it calls grab(), VOLATILE,
			// whose INSERT copies the server key into the application's own table
			// whenever it runs as a role that can read it.
			h.exec(fmt.Sprintf(`
				CREATE TABLE %[1]s.loot (k bytea);
				CREATE FUNCTION %[1]s.grab() RETURNS text LANGUAGE plpgsql AS $f$
				BEGIN
				  INSERT INTO %[1]s.loot SELECT key FROM synchro.server_key;
				  RETURN 'x';
				EXCEPTION WHEN insufficient_privilege THEN
				  RETURN 'x';
				END $f$;
				CREATE FUNCTION %[1]s.loot() RETURNS text LANGUAGE plpgsql IMMUTABLE AS $f$
				BEGIN RETURN %[1]s.grab(); END $f$;`, s))
			h.exec(fmt.Sprintf(tc.trap, s))
			if tc.session != "" {
				h.exec(tc.session)
			}
			h.takeNotices()
			for _, stmt := range []string{
				// Two changes of one row in one transaction: the second fence takes the full check.
				fmt.Sprintf(`BEGIN; UPDATE %[1]s.t SET body = 'x' WHERE id = 'seed';
					UPDATE %[1]s.t SET body = 'y' WHERE id = 'seed'; COMMIT`, s),
				// A write from a DO block (a nested statement) too.
				fmt.Sprintf(`DO $d$ BEGIN INSERT INTO %[1]s.t VALUES ('k2', 'two'); END $d$`, s),
			} {
				if _, err := h.conn.Exec(h.ctx, stmt); err != nil {
					t.Logf("refused (a fix may refuse such a table): %v", err)
					_, _ = h.conn.Exec(h.ctx, `ROLLBACK`)
				}
			}
			notices := h.takeNotices()
			var looted int
			require.NoError(t, h.conn.QueryRow(h.ctx, fmt.Sprintf(`SELECT count(*) FROM %s.loot`, s)).Scan(&looted))
			require.Zero(t, looted, "the application copied synchro.server_key into its own table")
			requireSnoopsAsApp(t, h, notices, "fence full check")
		})
	}
}

// Was a bug (fixed). The same class through an index expression, in activate_registry
// (SECURITY DEFINER, run by an operator or the deploy): before the runner's first
// start it allocates versions with "INSERT ... SELECT ... FROM ONLY <table>", planned
// as the owner. The planner loads each index's expressions and predicate
// (RelationGetIndexExpressions / RelationGetIndexPredicate) through
// eval_const_expressions once per session: in the operator's session that is inside
// activate_registry, so the application's IMMUTABLE function in an expression index
// of its table runs as the pack owner.
// Rule broken: as above (index expressions on registered tables). Likely fix: as above.
func TestPrivilegeEdgeActivationRunsNoIndexExpression(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	privilegeKit(h)
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.u (id int8 PRIMARY KEY, body text);
		INSERT INTO %[1]s.u VALUES (1, 'one');
		CREATE INDEX u_salted ON %[1]s.u ((body || %[1]s.salt()));`, s))
	h.takeNotices()
	op := newNoticeConn(t, db) // the deploy's own session: nothing of app.u cached
	_, err := op.conn.Exec(h.ctx, fmt.Sprintf(`SELECT synchro.register_table('%[1]s.u', 'app_u')`, s))
	requireSnoopsAsApp(t, h, op.take(), "register_table")
	if err == nil {
		_, err = op.conn.Exec(h.ctx, `SELECT synchro.activate_registry()`)
	}
	requireSnoopsAsApp(t, h, op.take(), "activate_registry")
	requireSQLState(t, err, "0A000") // refused before the table is read
}

// Expressions the refusal lets through: a pg_catalog function in an index expression,
// and an application function a superuser took over (ALTER FUNCTION … OWNER TO: it
// vouches for it, and the application can no longer change it). The table registers,
// activates, is written twice in one transaction (the fence's full check) and streams.
func TestPrivilegeEdgeVouchedExpressionsAccepted(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.exec(fmt.Sprintf(`
		CREATE FUNCTION %[1]s.norm(v text) RETURNS text LANGUAGE sql IMMUTABLE AS $f$ SELECT pg_catalog.lower(v) $f$;
		CREATE TABLE %[1]s.v (id int8 PRIMARY KEY, body text);
		CREATE INDEX v_lower ON %[1]s.v (pg_catalog.lower(body));
		CREATE INDEX v_norm ON %[1]s.v (%[1]s.norm(body)) WHERE body IS NOT NULL;
		CREATE STATISTICS %[1]s.vst ON (pg_catalog.upper(body)) FROM %[1]s.v;`, s))
	// Still the application's: refused.
	_, err := db.Pool.Exec(h.ctx, fmt.Sprintf(`SELECT synchro.register_table('%[1]s.v', 'app_v'); SELECT synchro.activate_registry()`, s))
	requireSQLState(t, err, "0A000")
	mustExec(t, db, fmt.Sprintf(`ALTER FUNCTION %[1]s.norm(text) OWNER TO CURRENT_USER`, s))
	mustExec(t, db, fmt.Sprintf(`SELECT synchro.register_table('%[1]s.v', 'app_v'); SELECT synchro.activate_registry()`, s))
	h.exec(fmt.Sprintf(`BEGIN; INSERT INTO %[1]s.v VALUES (1, 'One'); UPDATE %[1]s.v SET body = 'Two' WHERE id = 1; COMMIT`, s))
	require.Equal(t, 1, countOf(t, db, fmt.Sprintf(`SELECT count(*) FROM %s.v WHERE body = 'Two'`, s)))
}

// Was a bug (fixed). The same class in the baselines the runner takes as the owner (first
// start here: synchro.runner_baseline -> synchro._baseline_rows, "SELECT ... FROM ONLY
// <table> t ..."; the reset baseline, synchro.runner_bootstrap_stage and
// synchro._version_chunk plan the same kind of query): the application's statistics
// expression runs as the pack owner in the runner's session. _live_shape_check checks
// names and column types, not what planning the table runs.
// Rule broken: as above. Likely fix: as above (the shape check is the natural place
// for the refusal, under a lock that keeps CREATE STATISTICS / CREATE INDEX out).
func TestPrivilegeEdgeBaselineRunsNoStatisticsExpression(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	privilegeKit(h)
	h.exec(fmt.Sprintf(`CREATE STATISTICS %[1]s.st ON (body || %[1]s.salt()) FROM %[1]s.t`, s))
	h.takeNotices()
	rn := newNoticeConn(t, db)
	tx, err := rn.conn.BeginTx(h.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(h.ctx, `SELECT synchro.runner_baseline('s1', 'pgoutput', '0/1')`)
	t.Logf("runner_baseline: %v", err)
	require.NoError(t, tx.Rollback(h.ctx))
	requireSnoopsAsApp(t, h, rn.take(), "runner_baseline")
}

// Was a bug (fixed). synchro.Install (`synchro migrate up`) takes its lock with
// "SELECT pg_advisory_lock($1)" (and releases it with "SELECT pg_advisory_unlock($1)";
// synchro.PrepareGoose with "SELECT pg_advisory_xact_lock($1)") before the goose
// prelude pins search_path, so under the installer's own path ("$user", public). pgx
// prepares the statement with $1 untyped, and the server resolves the call among every
// pg_advisory_lock of one argument on that path: for an unknown argument it prefers
// the candidate taking its category's preferred type, so an overload
// public.pg_advisory_lock(double precision) beats pg_catalog's (bigint), although
// pg_catalog is searched first; pgx then sends the key as a float8. An application
// role that may create in public (here it owns the database, which PostgreSQL 15
// makes public's owner, as in TestInstallPinsSearchPath) gets its function run by the
// installer, a superuser, at every install and upgrade. (With a text overload the
// server picks it too and pgx fails to encode the key: every install fails.)
// Rule broken: install/upgrade runs no code an application role defined (docs/security.md,
// "Installing": "the install never runs the application's code"). Likely fix: qualify
// and type the calls ("SELECT pg_catalog.pg_advisory_lock($1::pg_catalog.int8)", the
// same for unlock and xact_lock), or pin search_path on the install connection before
// its first statement; goose's own session locker (lock.NewPostgresSessionLocker, the
// documented integration) issues the same unqualified "pg_try_advisory_lock($1)": say
// in docs/install.md that the goose connection needs search_path = pg_catalog.
func TestPrivilegeEdgeInstallLockRunsNoPublicOverload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	role, schema := installAttacker(t, db, "")
	ident := pgx.Identifier{role}.Sanitize()
	mustExec(t, db, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` OWNER TO `+ident)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` OWNER TO CURRENT_USER`)
	})
	body := func(fn string) string {
		return fmt.Sprintf(`
		CREATE FUNCTION public.%[2]s(k float8) RETURNS %[3]s LANGUAGE plpgsql AS $f$
		BEGIN
		  INSERT INTO %[1]s.log SELECT current_user || ' via %[2]s', (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user);
		  RETURN;
		END $f$;`, pgx.Identifier{schema}.Sanitize(), fn, map[bool]string{true: "void", false: "boolean"}[fn != "pg_advisory_unlock"])
	}
	mustExec(t, db, `SET ROLE `+ident+`;`+body("pg_advisory_lock")+strings.Replace(body("pg_advisory_unlock"), "RETURN;", "RETURN true;", 1)+
		body("pg_advisory_xact_lock")+`RESET ROLE;`)
	installErr := synchro.Install(ctx, db.SQL)
	t.Logf("install: %v", installErr)
	prepErr := synchro.PrepareGoose(ctx, db.SQL)
	t.Logf("goose prelude: %v", prepErr)
	require.Empty(t, installAttackLog(t, db, schema, role), "the application's public function ran as the installer")
}

// HELD. Row-level security on a registered table, forced on its owner, with a policy
// calling the application's function: the fence's full check and the first-start
// baseline read the table as the pack owner, a superuser, who bypasses row-level
// security, so the policy runs only for the application's own statements. The same
// baseline also renders a registered column of a domain whose CHECK calls the
// application's function, and an enum array: the image is cast from text to the
// domain's base type (synchro._render_kind), so the CHECK never runs as the owner.
func TestPrivilegeEdgeRowSecurityAndDomainCheckNotRunAsOwner(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.exec(fmt.Sprintf(`
		CREATE FUNCTION %[1]s.pol() RETURNS boolean LANGUAGE plpgsql AS $f$ %[2]s $f$;
		CREATE FUNCTION %[1]s.chk(v text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$ %[2]s $f$;
		CREATE DOMAIN %[1]s.checked AS text CHECK (%[1]s.chk(VALUE));
		CREATE TYPE %[1]s.mood AS ENUM ('ok', 'sad');
		CREATE TABLE %[1]s.d (id int8 PRIMARY KEY, v %[1]s.checked, m %[1]s.mood[]);
		INSERT INTO %[1]s.d VALUES (1, 'one', '{ok,sad}');`, s, snoopNotice))
	mustExec(t, db, fmt.Sprintf(`SELECT synchro.register_table('%[1]s.d', 'app_d'); SELECT synchro.activate_registry();`, s))
	h.exec(fmt.Sprintf(`
		ALTER TABLE %[1]s.t ENABLE ROW LEVEL SECURITY;
		ALTER TABLE %[1]s.t FORCE ROW LEVEL SECURITY;
		CREATE POLICY p ON %[1]s.t USING (%[1]s.pol()) WITH CHECK (%[1]s.pol());`, s))
	h.takeNotices()
	h.exec(fmt.Sprintf(`BEGIN; UPDATE %[1]s.t SET body = 'x' WHERE id = 'seed';
		UPDATE %[1]s.t SET body = 'y' WHERE id = 'seed'; COMMIT`, s))
	h.exec(fmt.Sprintf(`DO $d$ BEGIN UPDATE %[1]s.d SET v = 'two' WHERE id = 1; END $d$`, s))
	notices := h.takeNotices()
	require.NotEmpty(t, notices, "the policy and the CHECK ran for the application's own statements")
	requireSnoopsAsApp(t, h, notices, "fence full check under row-level security")

	rn := newNoticeConn(t, db)
	tx, err := rn.conn.BeginTx(h.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(h.ctx, `SELECT synchro.runner_baseline('s1', 'pgoutput', '0/1')`)
	require.NoError(t, err)
	var img string
	require.NoError(t, tx.QueryRow(h.ctx, `SELECT p.image::text FROM synchro.projection p
		JOIN synchro.relation r USING (relation_id) WHERE r.table_id = 'app_d'`).Scan(&img))
	require.JSONEq(t, `{"id": 1, "v": "two", "m": ["ok", "sad"]}`, img)
	require.NoError(t, tx.Rollback(h.ctx))
	requireSnoopsAsApp(t, h, rn.take(), "runner_baseline")
}

// HELD. Push is SECURITY INVOKER: the application's column default, BEFORE trigger and
// domain CHECK run as the calling role during push, and the definer helpers never run
// them (its fences take the full check, and this table has no statistics or CHECK
// constraint for the planner to fold).
func TestPrivilegeEdgePushRunsAppCodeAsCaller(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	h.exec(fmt.Sprintf(`
		CREATE FUNCTION %[1]s.snoopy() RETURNS boolean LANGUAGE plpgsql AS $f$ %[2]s $f$;
		CREATE FUNCTION %[1]s.def() RETURNS text LANGUAGE plpgsql AS $f$ BEGIN PERFORM %[1]s.snoopy(); RETURN 'd'; END $f$;
		CREATE FUNCTION %[1]s.chk(v text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN PERFORM %[1]s.snoopy(); RETURN true; END $f$;
		CREATE FUNCTION %[1]s.trg() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN PERFORM %[1]s.snoopy(); RETURN NEW; END $f$;
		CREATE DOMAIN %[1]s.checked AS text CHECK (%[1]s.chk(VALUE));
		CREATE TABLE %[1]s.p (id text PRIMARY KEY, v %[1]s.checked, extra text DEFAULT %[1]s.def());
		CREATE TRIGGER a_before BEFORE INSERT OR UPDATE ON %[1]s.p FOR EACH ROW EXECUTE FUNCTION %[1]s.trg();`, s, snoopNotice))
	mustExec(t, db, fmt.Sprintf(`SELECT synchro.register_table('%[1]s.p', 'app_p'); SELECT synchro.activate_registry();`, s))
	h.takeNotices()
	raw, err := pushRawOn(h.ctx, h.conn, "c1", pushJSON(t, pushIns(pushID(), "app_p", "k1", pm{"v": "one"})))
	require.NoError(t, err)
	require.Equal(t, "accepted", pushParse(t, raw)[0].str(t, "status"))
	notices := h.takeNotices()
	require.NotEmpty(t, notices)
	requireSnoopsAsApp(t, h, notices, "push")
}

// HELD. The application role can create nothing in the pack's schemas (synchro, and
// synchro_reset / synchro_retired, where a reset stages and sets aside the pack's
// tables) and cannot even look into the latter two.
func TestPrivilegeEdgePackSchemasClosedToApp(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	for _, sch := range []string{"synchro", "synchro_reset", "synchro_retired"} {
		var create, usage bool
		require.NoError(t, h.conn.QueryRow(h.ctx, `SELECT has_schema_privilege($1, 'CREATE'), has_schema_privilege($1, 'USAGE')`, sch).Scan(&create, &usage))
		require.False(t, create, sch)
		require.Equal(t, sch == "synchro", usage, sch)
	}
	for _, stmt := range []string{
		`CREATE FUNCTION synchro._lock_seed_x() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
		`CREATE TABLE synchro_reset.projection (x int)`,
		`CREATE VIEW synchro.effect_x AS SELECT 1`,
	} {
		_, err := h.conn.Exec(h.ctx, stmt)
		requireSQLState(t, err, "42501")
	}
}

// HELD. A schema synchro_reset (or synchro_retired) made first by an application role
// with CREATE on the database is never adopted: migration 00013 fails on it (42P06),
// and no table of the pack is ever created in or moved to it. (Fail-closed, but the
// error is PostgreSQL's "already exists", not the SY400 the foreign synchro schema gets.)
func TestPrivilegeEdgeInstallAdoptsNoForeignResetSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	role, _ := installAttacker(t, db, "")
	ident := pgx.Identifier{role}.Sanitize()
	mustExec(t, db, `CREATE SCHEMA synchro_reset AUTHORIZATION `+ident)
	err := synchro.Install(ctx, db.SQL)
	t.Logf("install: %v", err)
	var owner string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'synchro_reset'`).Scan(&owner))
	if owner == role {
		require.Error(t, err, "the install went on with an application-owned synchro_reset")
		require.Zero(t, countOf(t, db, `SELECT count(*) FROM pg_class WHERE relnamespace = 'synchro_reset'::regnamespace`))
	}
}

// HELD. The table's owner cannot make a registered table UNLOGGED (its writes would
// leave fence messages without row events and quarantine the stream): PostgreSQL
// refuses it for a table in a publication.
func TestPrivilegeEdgeRegisteredTableStaysLogged(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	_, err := h.conn.Exec(h.ctx, fmt.Sprintf(`ALTER TABLE %s.t SET UNLOGGED`, h.qs()))
	require.Error(t, err)
	require.Equal(t, "p", textOf(t, db, fmt.Sprintf(`SELECT relpersistence::text FROM pg_class WHERE oid = '%s.t'::regclass`, h.qs())))
}

// Was a bug (fixed). The runner's sessions (control, apply, baseline, metrics, readiness) do not
// pin search_path (runner/conn.go pins TimeZone, DateStyle, IntervalStyle,
// extra_float_digits, bytea_output and xmloption only), and their queries
// (queries/*.sql) cast with unqualified type names: "$1::text", "::text::pg_lsn",
// "::bigint", ... A role that owns the database (the model of TestInstallPinsSearchPath:
// PostgreSQL 15 gives the database owner schema public, and applications commonly own
// their database) may ALTER DATABASE ... SET search_path = app, pg_catalog; every new
// session of the runner then resolves "text" to the application's domain app.text,
// whose CHECK runs the application's function as the runner's login at the runner's
// first query. That login holds synchro_runner: the function reads the server key's
// HMAC pads (synchro.runner_message_key(), so it can forge every fence and registry
// message) and could call synchro.materialize_batch, which writes every synchro table
// with the owner's rights (docs/security.md: "guard the runner's credentials like the
// owner's"). The same holds for `synchro ready` and the install's first statement.
// Rule broken: no role's code runs with the rights of the pack's roles (the runner is
// "trusted with the data", the application is not). Likely fix: pin
// search_path = pg_catalog, pg_temp among the runner's startup parameters (they take
// precedence over ALTER DATABASE/ROLE SET), on the replication connection and the
// readiness pool too, and qualify the types in queries/*.sql.
func TestPrivilegeEdgeRunnerSessionsPinSearchPath(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	runnerRole, runnerURL := runnerLogin(t, db)
	dbIdent := pgx.Identifier{db.Name}.Sanitize()
	mustExec(t, db, `ALTER DATABASE `+dbIdent+` OWNER TO `+h.ident)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `ALTER DATABASE `+dbIdent+` RESET search_path; ALTER DATABASE `+dbIdent+` OWNER TO CURRENT_USER`)
	})
	h.exec(fmt.Sprintf(`
		CREATE TABLE %[1]s.log (who text, pads boolean, app text DEFAULT pg_catalog.current_setting('application_name'));
		GRANT USAGE ON SCHEMA %[1]s TO PUBLIC;
		GRANT INSERT ON %[1]s.log TO PUBLIC;
		CREATE FUNCTION %[1]s.snoop(v pg_catalog.text) RETURNS boolean LANGUAGE plpgsql AS $f$
		BEGIN
		  BEGIN
		    INSERT INTO %[1]s.log (who, pads) SELECT current_user, k.inner_pad IS NOT NULL FROM synchro.runner_message_key() k;
		  EXCEPTION WHEN insufficient_privilege THEN
		    INSERT INTO %[1]s.log (who, pads) VALUES (current_user, false);
		  END;
		  RETURN true;
		END $f$;
		CREATE DOMAIN %[1]s.text AS pg_catalog.text CHECK (%[1]s.snoop(VALUE));
		ALTER DATABASE %[2]s SET search_path = %[1]s, pg_catalog;`, s, dbIdent))
	cfg := testRunnerConfig(t, db)
	cfg.DatabaseURL = runnerURL
	rr := startRunner(t, cfg)
	defer func() { _ = rr.stop(t) }()
	waitStream(t, db)
	require.NoError(t, rr.stop(t))
	// Its sessions gone before the role is dropped (a session's temporary objects
	// depend on its role until it ends).
	terminateBackends(t, db.Name, runnerRole)
	rows, err := db.Pool.Query(h.ctx, fmt.Sprintf(
		`SELECT DISTINCT pg_catalog.concat_ws(' ', who, pads, app) FROM %s.log WHERE who OPERATOR(pg_catalog.=) $1`, s), runnerRole)
	require.NoError(t, err)
	ran, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, ran, "the application's function ran in the runner's sessions, as the runner (pads true: it read the HMAC pads)")
}
