package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// From an independent review (2026-12-04; no bug found) of the semantics of materialization: the pull
// effects clients receive for a rule set with several direct rules on one table, via
// rules sharing one dependency (through the same and through another match column),
// direct and via rules sharing a prefix, and a second synced table, compared with an
// independent Go evaluator of CONTRACT.md ("Registry": a row's scopes are the union of
// its table's rules; NULL gives no scope) and ADR 001 ("Materialization transactions
// execute serially in source commit order ... evaluates the union of impacted
// synchronized rows against that final projected state, writes net membership and
// pull effects"; positions (commit_lsn, event_ordinal, effect_ordinal), effect
// ordinals in canonical (table_id, typed key, operation) order), and the net-effect
// rule of docs/reliability.md (touched rows get an upsert in each scope they are in;
// rows reached through a dependency change get an upsert in a scope they enter; a
// delete in each scope left; the effect belongs to the last event that impacted the
// row).
//
// The evaluator sees only what the test wrote: the committed row images (RETURNING)
// and the versions the fences allocated (synchro.row_version read inside the writing
// transaction, before commit), in commit order. It never reads what materialization
// wrote, except the commit LSN of each transaction (by xid) to place effects, and a
// projection bootstrap's consistent point (the transactions before it drop that
// relation's events, docs/bootstrap.md).
//
// Checked after every pull page of every client: the page's changes are exactly the
// evaluator's effects between the two cursors, in order; a has_more cursor is the
// position of the last change; the replica equals the evaluator's state at the
// cursor (a transaction end, or inside one). At the end: synchro.effect and
// synchro.membership equal the evaluator's (scopes longer than pull's 512 characters
// included), no stored effect contradicts the memberships before and after its
// transaction (no spurious delete or upsert), and a fresh rebuild of every scope is
// the final state, in the contract's order, with its checksum.
//
// Outside the comparison (unobservable: every cursor of the prefix is stale and a
// rebuild waits with SY503 until the change is materialized or merged): effects of a
// prefix whose rules changed, in the activating transaction, and those of a prefix
// whose projection bootstrap is not merged yet.
//
//	SYNCHRO_SEMANTICS_SEED=42 go test ./tests -run TestSemanticsModel -count=1 -v

const rsDefaultSeed = 20240611

func rsSeed(t *testing.T) int64 {
	seed := int64(rsDefaultSeed)
	if s := os.Getenv("SYNCHRO_SEMANTICS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "SYNCHRO_SEMANTICS_SEED")
		seed = v
	}
	t.Logf("review semantics seed %d (override with SYNCHRO_SEMANTICS_SEED=%d)", seed, seed)
	return seed
}

// rsSchema: members is a capture dependency; tasks and notes are synced.
//
//	tasks  owner:    <- owner                       (direct)
//	tasks  owner:    <- assignee                    (direct, second rule, same prefix)
//	tasks  user:     <- assignee                    (direct, same prefix as a via rule)
//	tasks  user:     <- project_id via members(project_id -> user_id)
//	tasks  role:     <- project_id via members(project_id -> role)   (shares the dependency and match column)
//	tasks  team:     <- owner via members(user_id -> project_id)     (shares the dependency, another match column)
//	notes  owner:    <- owner                       (direct)
//	notes  user:     <- owner via members(user_id -> user_id)
//	notes  user:     <- id via shares(note_id -> user_id)          (a second dependency, through the key)
//
// members.note is not registered: an update of it alone is a dependency event that
// changes no rule value.
const rsSchema = `
CREATE TABLE members (id int8 PRIMARY KEY, project_id int8, user_id text, role text, note text);
CREATE TABLE tasks (id int8 PRIMARY KEY, project_id int8, owner text, assignee text, title text, v int NOT NULL DEFAULT 0);
CREATE TABLE notes (id text PRIMARY KEY, owner text, body text);
CREATE TABLE shares (id int8 PRIMARY KEY, note_id text, user_id text);
SELECT synchro.register_dependency('members', ARRAY['project_id', 'user_id', 'role']::name[]);
SELECT synchro.register_dependency('shares');
SELECT synchro.register_table('tasks', 'tasks');
SELECT synchro.register_table('notes', 'notes');
SELECT synchro.add_scope_rule('tasks', 'owner:', 'owner');
SELECT synchro.add_scope_rule('tasks', 'owner:', 'assignee');
SELECT synchro.add_scope_rule('tasks', 'user:', 'assignee');
SELECT synchro.add_scope_rule('tasks', 'user:', 'project_id', 'members', 'project_id', 'user_id');
SELECT synchro.add_scope_rule('tasks', 'role:', 'project_id', 'members', 'project_id', 'role');
SELECT synchro.add_scope_rule('tasks', 'team:', 'owner', 'members', 'user_id', 'project_id');
SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
SELECT synchro.add_scope_rule('notes', 'user:', 'owner', 'members', 'user_id', 'user_id');
SELECT synchro.add_scope_rule('notes', 'user:', 'id', 'shares', 'note_id', 'user_id');
SELECT synchro.activate_registry();`

type rsRule struct {
	table, prefix, col string
	via                bool
	dep                string // the via relation: members unless named
	match, scopeCol    string
}

func (r rsRule) viaRel() string {
	if r.dep == "" {
		return "members"
	}
	return r.dep
}

var rsRules = []rsRule{
	{table: "tasks", prefix: "owner:", col: "owner"},
	{table: "tasks", prefix: "owner:", col: "assignee"},
	{table: "tasks", prefix: "user:", col: "assignee"},
	{table: "tasks", prefix: "user:", col: "project_id", via: true, match: "project_id", scopeCol: "user_id"},
	{table: "tasks", prefix: "role:", col: "project_id", via: true, match: "project_id", scopeCol: "role"},
	{table: "tasks", prefix: "team:", col: "owner", via: true, match: "user_id", scopeCol: "project_id"},
	{table: "notes", prefix: "owner:", col: "owner"},
	{table: "notes", prefix: "user:", col: "owner", via: true, match: "user_id", scopeCol: "user_id"},
	{table: "notes", prefix: "user:", col: "id", via: true, dep: "shares", match: "note_id", scopeCol: "user_id"},
}

var rsKeyType = map[string]string{"tasks": "int8", "notes": "text", "members": "int8", "shares": "int8", "squads": "int8"}

// rsDeps are the capture dependencies (squads joins mid-stream, holding rows).
var rsDeps = map[string]bool{"members": true, "shares": true, "squads": true}

// Rule values: empty, unicode, a backslash, quotes and LIKE characters, 400 two-byte
// characters (a pullable scope) and 600 characters (a scope longer than pull's 512:
// checked through synchro.membership and synchro.effect only).
var (
	rsLong400 = strings.Repeat("ж", 399) + "1"
	rsLong600 = strings.Repeat("q", 599) + "2"
	// 3,000 pseudo-random letters: stored out of line, left unchanged by updates of
	// other columns (unchanged TOAST in the WAL).
	rsHuge = func() string {
		r := rand.New(rand.NewSource(7))
		b := make([]byte, 3000)
		for i := range b {
			b[i] = byte('a' + r.Intn(26))
		}
		return string(b)
	}()
	rsUsers   = []any{"a", "b", "c", "", "ü😀", `x\y`, "O'Brien %_", rsLong400, rsLong600, rsHuge, "a:b\n\tc", nil}
	rsRoles   = []any{"dev", "ops", "", "ü😀", nil}
	rsNoteIDs = []string{"n1", "n2", "", "ü", "N1", "a b", "n\\"}
)

// rsScopes are every scope the value domains can make, plus one never used.
func rsScopes() []string {
	set := map[string]bool{"owner:zzz": true}
	for _, u := range rsUsers {
		if u != nil {
			set["owner:"+u.(string)] = true
			set["user:"+u.(string)] = true
		}
	}
	for _, r := range rsRoles {
		if r != nil {
			set["role:"+r.(string)] = true
		}
	}
	for p := 1; p <= 5; p++ {
		set[fmt.Sprintf("team:%d", p)] = true
	}
	for _, r := range rsRoles {
		if r != nil {
			set["rev:"+r.(string)] = true
		}
	}
	for _, u := range rsUsers[:5] {
		set["squad:"+u.(string)] = true
	}
	var out []string
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func rsPullable(scope string) bool { return utf8.RuneCountInString(scope) <= 512 }

// rsShort names a scope in messages.
func rsShort(s string) string {
	if utf8.RuneCountInString(s) <= 40 {
		return s
	}
	h := sha256.Sum256([]byte(s))
	r := []rune(s)
	return fmt.Sprintf("%s…(%d chars %x)", string(r[:12]), len(r), h[:4])
}

// ---------------------------------------------------------------- the evaluator

type rsRow map[string]any // column -> nil, string or json.Number

func rsText(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case json.Number:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	default:
		panic(fmt.Sprintf("value %T", v))
	}
}

type rsEvent struct {
	rel     string
	pk      string
	row     rsRow // nil: deleted
	version string
	image   string // canonical JSON, synced rows
}

type rsTxn struct {
	xid    int64
	events []rsEvent
	// A registry activation in the transaction: the rules after it, and the prefixes
	// whose rule set changed (their cursors go stale; no incremental effects).
	newRules []rsRule
	changed  map[string]bool
	// Rows of a relation that joins the registry holding them (its bootstrap).
	preload map[string]map[string]rsRow
	effects []rsEffect
	alt     []rsEffect // the effects should the pending relations' events be dropped
}

type rsEffect struct {
	txn, ev, eff int
	scope        string
	table, pk    string
	op           string
	version      string
	image        string
}

func (e rsEffect) change() string {
	if e.op == "delete" {
		return fmt.Sprintf("delete %s/%s", e.table, e.pk)
	}
	return fmt.Sprintf("upsert %s/%s %s %s", e.table, e.pk, e.version, e.image)
}

type rsSynced struct {
	row     rsRow
	version string
	image   string
}

type rsModel struct {
	rules []rsRule
	// Prefixes whose membership is not incremental yet (a projection bootstrap not
	// merged): evaluated afresh after every transaction, no effects expected.
	pending    map[string]bool
	pendingRel map[string]bool
	synced     map[string]map[string]*rsSynced // table -> pk -> row
	deps       map[string]map[string]rsRow     // dependency -> pk -> row
	member     map[string]map[string]bool      // "table/pk" -> scopes
	effects    []rsEffect
	byScope    map[string][]int // scope -> indexes into effects, in stream order
	// Per scope, the states: states[0] the baseline, states[i+1] after transaction i.
	states []map[string]replica
	// memberships[0] the baseline's, memberships[i+1] after transaction i.
	memberships []map[string]map[string]bool
	txns        []rsTxn
}

func newRsModel() *rsModel {
	return &rsModel{rules: rsRules, synced: map[string]map[string]*rsSynced{"tasks": {}, "notes": {}}, deps: map[string]map[string]rsRow{"members": {}, "shares": {}, "squads": {}},
		member: map[string]map[string]bool{}}
}

func (m *rsModel) scopesOf(table string, row rsRow) map[string]bool {
	out := map[string]bool{}
	for _, r := range m.rules {
		if r.table != table {
			continue
		}
		v, ok := rsText(row[r.col])
		if !ok {
			continue
		}
		if !r.via {
			out[r.prefix+v] = true
			continue
		}
		for _, d := range m.deps[r.viaRel()] {
			if mv, ok := rsText(d[r.match]); ok && mv == v {
				if sv, ok := rsText(d[r.scopeCol]); ok {
					out[r.prefix+sv] = true
				}
			}
		}
	}
	return out
}

func rsKeyLess(table, a, b string) bool {
	if rsKeyType[table] != "text" {
		x, _ := strconv.ParseInt(a, 10, 64)
		y, _ := strconv.ParseInt(b, 10, 64)
		return x < y
	}
	return a < b
}

// snapshot records the state of every scope and the memberships.
func (m *rsModel) snapshot() {
	st := map[string]replica{}
	mem := map[string]map[string]bool{}
	for k, scopes := range m.member {
		table, pk, _ := strings.Cut(k, "/")
		r := m.synced[table][pk]
		cp := map[string]bool{}
		for s := range scopes {
			cp[s] = true
			if st[s] == nil {
				st[s] = replica{}
			}
			st[s][k] = replicaRow{r.version, r.image}
		}
		mem[k] = cp
	}
	m.states = append(m.states, st)
	m.memberships = append(m.memberships, mem)
}

// baseline: the rows already there when the stream starts.
func (m *rsModel) baseline(events []rsEvent) {
	for _, e := range events {
		if rsDeps[e.rel] {
			m.deps[e.rel][e.pk] = e.row
		} else {
			m.synced[e.rel][e.pk] = &rsSynced{e.row, e.version, e.image}
		}
	}
	for table, rows := range m.synced {
		for pk, r := range rows {
			if s := m.scopesOf(table, r.row); len(s) > 0 {
				m.member[table+"/"+pk] = s
			}
		}
	}
	m.snapshot()
}

// apply materializes one committed transaction by the contract's rules.
func (m *rsModel) apply(tx rsTxn) {
	ti := len(m.txns)
	if tx.newRules != nil {
		tx.changed = rsChangedPrefixes(m.rules, tx.newRules)
		m.rules = tx.newRules
	}
	for rel, rows := range tx.preload {
		for pk, r := range rows {
			m.deps[rel][pk] = r
		}
	}
	if len(m.pending) > 0 {
		if tx.changed == nil {
			tx.changed = map[string]bool{}
		}
		for p := range m.pending {
			tx.changed[p] = true
		}
	}
	m.txns = append(m.txns, tx)
	depBefore := map[string]rsRow{}
	depSeen := map[string]bool{}
	depLast := map[string]int{}
	impacted := map[string]int{} // "table/pk" -> attributed event
	touched := map[string]bool{}
	for i, e := range tx.events {
		if rsDeps[e.rel] {
			dk := e.rel + "/" + e.pk
			if !depSeen[dk] {
				depSeen[dk] = true
				depBefore[dk] = m.deps[e.rel][e.pk]
			}
			depLast[dk] = i
			if e.row == nil {
				delete(m.deps[e.rel], e.pk)
			} else {
				m.deps[e.rel][e.pk] = e.row
			}
			continue
		}
		k := e.rel + "/" + e.pk
		touched[k] = true
		impacted[k] = i
		if e.row == nil {
			delete(m.synced[e.rel], e.pk)
		} else {
			m.synced[e.rel][e.pk] = &rsSynced{e.row, e.version, e.image}
		}
	}
	// A rule change: the changed prefixes' membership of every row, afresh from the
	// transaction's final state.
	if len(tx.changed) > 0 {
		for key, scopes := range m.member {
			for s := range scopes {
				if tx.changed[rsPrefixOf(s)] {
					delete(scopes, s)
				}
			}
			if len(scopes) == 0 {
				delete(m.member, key)
			}
		}
		for table, rows := range m.synced {
			for pk, r := range rows {
				for s := range m.scopesOf(table, r.row) {
					if tx.changed[rsPrefixOf(s)] {
						key := table + "/" + pk
						if m.member[key] == nil {
							m.member[key] = map[string]bool{}
						}
						m.member[key][s] = true
					}
				}
			}
		}
	}
	effs, member := m.effectsOf(ti, tx, touched, impacted, depLast, depBefore)
	if len(m.pending) > 0 {
		// Events of a relation whose bootstrap is not merged: those of a transaction
		// before its consistent point are dropped (the staged snapshot holds them) and
		// impact nothing; which transactions those are is known once it is staged.
		without := map[string]int{}
		for dk, k := range depLast {
			if rel, _, _ := strings.Cut(dk, "/"); !m.pendingRel[rel] {
				without[dk] = k
			}
		}
		if len(without) != len(depLast) {
			tx.alt, _ = m.effectsOf(ti, tx, touched, impacted, without, depBefore)
		}
	}
	m.member = member
	tx.effects = effs
	m.txns[ti] = tx
	m.addEffects(effs)
	m.snapshot()
}

// addEffects appends effects (in stream order within their transaction) and indexes
// them by scope.
func (m *rsModel) addEffects(effs []rsEffect) {
	if m.byScope == nil {
		m.byScope = map[string][]int{}
	}
	for _, e := range effs {
		m.byScope[e.scope] = append(m.byScope[e.scope], len(m.effects))
		m.effects = append(m.effects, e)
	}
}

// effectsOf computes a transaction's effects (the rows touched by an event, with their
// last event, and the rows changed dependency rows reach) and the memberships after it.
func (m *rsModel) effectsOf(ti int, tx rsTxn, touched map[string]bool, touchedEv map[string]int, depLast map[string]int,
	depBefore map[string]rsRow) ([]rsEffect, map[string]map[string]bool) {
	impacted := map[string]int{}
	for k, v := range touchedEv {
		impacted[k] = v
	}
	// Synced rows reached by a changed dependency row: their rule column equals the
	// dependency row's match value before or after the transaction.
	for dk, k := range depLast {
		rel, pk, _ := strings.Cut(dk, "/")
		before, after := depBefore[dk], m.deps[rel][pk]
		for _, r := range m.rules {
			if !r.via || r.viaRel() != rel {
				continue
			}
			vals := map[string]bool{}
			for _, d := range []rsRow{before, after} {
				if d != nil {
					if v, ok := rsText(d[r.match]); ok {
						vals[v] = true
					}
				}
			}
			for rpk, row := range m.synced[r.table] {
				if v, ok := rsText(row.row[r.col]); ok && vals[v] {
					key := r.table + "/" + rpk
					if old, ok := impacted[key]; !ok || k > old {
						impacted[key] = k
					}
				}
			}
		}
	}
	member := map[string]map[string]bool{}
	for k, v := range m.member {
		member[k] = v
	}
	var effs []rsEffect
	for key, ev := range impacted {
		table, pk, _ := strings.Cut(key, "/")
		old := m.member[key]
		now := map[string]bool{}
		r := m.synced[table][pk]
		if r != nil {
			now = m.scopesOf(table, r.row)
		}
		for s := range now {
			if tx.changed[rsPrefixOf(s)] {
				continue // unobservable: every cursor of the prefix is stale
			}
			if touched[key] || !old[s] {
				effs = append(effs, rsEffect{txn: ti, ev: ev, scope: s, table: table, pk: pk, op: "upsert",
					version: r.version, image: r.image})
			}
		}
		for s := range old {
			if !now[s] && !tx.changed[rsPrefixOf(s)] {
				effs = append(effs, rsEffect{txn: ti, ev: ev, scope: s, table: table, pk: pk, op: "delete"})
			}
		}
		if len(now) > 0 {
			member[key] = now
		} else {
			delete(member, key)
		}
	}
	sort.Slice(effs, func(i, j int) bool {
		a, b := effs[i], effs[j]
		if a.ev != b.ev {
			return a.ev < b.ev
		}
		if a.scope != b.scope {
			return a.scope < b.scope
		}
		if a.table != b.table {
			return a.table < b.table
		}
		if a.pk != b.pk {
			return rsKeyLess(a.table, a.pk, b.pk)
		}
		return a.op < b.op
	})
	for i := range effs {
		if i > 0 && effs[i-1].ev == effs[i].ev && effs[i-1].scope == effs[i].scope {
			effs[i].eff = effs[i-1].eff + 1
		}
	}
	return effs, member
}

// settleBootstrap: once the bootstrap of the pending relations is staged, the
// transactions before its consistent point take their effects without those relations'
// events (see apply).
func (m *rsModel) settleBootstrap(c pglogrepl.LSN, lsns []pglogrepl.LSN) {
	changed := false
	for i := range m.txns {
		tx := &m.txns[i]
		if tx.alt == nil || lsns[i] == 0 {
			continue
		}
		if lsns[i] < c {
			tx.effects = tx.alt
		}
		tx.alt = nil
		changed = true
	}
	if changed {
		m.effects, m.byScope = nil, nil
		for _, tx := range m.txns {
			m.addEffects(tx.effects)
		}
	}
}

// rsPrefixes are every prefix of the rules before and after the test's activation.
var rsPrefixes = []string{"owner:", "user:", "role:", "team:", "rev:", "squad:"}

func rsPrefixOf(scope string) string {
	for _, p := range rsPrefixes {
		if strings.HasPrefix(scope, p) {
			return p
		}
	}
	panic("no prefix: " + scope)
}

// rsChangedPrefixes: the prefixes whose set of rules differs.
func rsChangedPrefixes(before, after []rsRule) map[string]bool {
	set := func(rules []rsRule) map[string]map[rsRule]bool {
		out := map[string]map[rsRule]bool{}
		for _, r := range rules {
			if out[r.prefix] == nil {
				out[r.prefix] = map[rsRule]bool{}
			}
			out[r.prefix][r] = true
		}
		return out
	}
	b, a := set(before), set(after)
	changed := map[string]bool{}
	for _, p := range rsPrefixes {
		if len(b[p]) != len(a[p]) {
			changed[p] = true
			continue
		}
		for r := range b[p] {
			if !a[p][r] {
				changed[p] = true
			}
		}
	}
	return changed
}

// ---------------------------------------------------------------- positions

type rsPos struct {
	lsn     pglogrepl.LSN
	ev, eff int64
}

func (a rsPos) less(b rsPos) bool {
	if a.lsn != b.lsn {
		return a.lsn < b.lsn
	}
	if a.ev != b.ev {
		return a.ev < b.ev
	}
	return a.eff < b.eff
}

func (a rsPos) String() string {
	return fmt.Sprintf("%s/%d/%d", a.lsn, a.ev, a.eff)
}

// rsCursorPos reads the point of a cursor (white box: base64url of the payload
// "c1:<token>:<rule generation>:<point>" and a 32-byte MAC; docs of synchro._cursor).
func rsCursorPos(t *testing.T, cursor string) rsPos {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	require.NoError(t, err)
	require.Greater(t, len(raw), 32)
	parts := strings.Split(string(raw[:len(raw)-32]), ":")
	require.Len(t, parts, 4, "%q", raw[:len(raw)-32])
	point := parts[3]
	switch {
	case point == "s":
		return rsPos{0, -1, -1}
	case strings.HasPrefix(point, "t."):
		l, err := pglogrepl.ParseLSN(point[2:])
		require.NoError(t, err)
		return rsPos{l, math.MaxInt32, math.MaxInt32}
	default:
		f := strings.Split(point, ".")
		require.Len(t, f, 4, point)
		l, err := pglogrepl.ParseLSN(f[1])
		require.NoError(t, err)
		ev, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		eff, err := strconv.ParseInt(f[3], 10, 64)
		require.NoError(t, err)
		return rsPos{l, ev, eff}
	}
}

// ---------------------------------------------------------------- the writer

type rsEnv struct {
	t      *testing.T
	ctx    context.Context
	e      *syncEnv
	db     *testdb.DB
	m      *rsModel
	rng    *rand.Rand
	relIDs map[string]int64
	lsns   []pglogrepl.LSN   // per transaction (0: no events, never materialized)
	acts   []map[string]bool // the changed prefixes of each registry activation
	half   int               // 1, 2: random keys from the lower or upper half (txnPair)
	mut    int               // push mutation ids
	squads bool              // squads is registered
}

type rsTx struct {
	env      *rsEnv
	tx       pgx.Tx
	events   []rsEvent
	newRules []rsRule
	preload  map[string]map[string]rsRow
}

// rolledBack runs body inside a savepoint that is rolled back: its row changes never
// reach the stream.
func (b *rsTx) rolledBack(body func()) {
	_, err := b.tx.Exec(b.env.ctx, `SAVEPOINT rs`)
	require.NoError(b.env.t, err)
	n := len(b.events)
	body()
	_, err = b.tx.Exec(b.env.ctx, `ROLLBACK TO SAVEPOINT rs`)
	require.NoError(b.env.t, err)
	b.events = b.events[:n]
}

// activate runs a registry change in the transaction; rules are the rules after it.
func (b *rsTx) activate(sql string, rules []rsRule) {
	_, err := b.tx.Exec(b.env.ctx, sql)
	require.NoError(b.env.t, err)
	b.newRules = rules
}

func (b *rsTx) run(rel, sql string, args ...any) {
	env := b.env
	var image string
	err := b.tx.QueryRow(env.ctx, sql, args...).Scan(&image)
	if err == pgx.ErrNoRows {
		return // no row changed: no event
	}
	require.NoError(env.t, err, sql)
	d := json.NewDecoder(strings.NewReader(image))
	d.UseNumber()
	var row rsRow
	require.NoError(env.t, d.Decode(&row))
	pk, _ := rsText(row["id"])
	ev := rsEvent{rel: rel, pk: pk, row: row}
	if strings.HasPrefix(strings.TrimSpace(sql), "DELETE") {
		ev.row = nil
	} else if !rsDeps[rel] {
		require.NoError(env.t, b.tx.QueryRow(env.ctx, `SELECT version FROM synchro.row_version WHERE relation_id = $1 AND pk = $2`,
			env.relIDs[rel], pk).Scan(&ev.version))
		ev.image = canon(env.t, []byte(image))
	}
	b.events = append(b.events, ev)
}

// many runs a statement of many rows (RETURNING to_jsonb of each row, in the order
// they were changed, which is their order in the WAL).
func (b *rsTx) many(rel, sql string, args ...any) int {
	env := b.env
	rows, err := b.tx.Query(env.ctx, sql, args...)
	require.NoError(env.t, err, sql)
	var images []string
	for rows.Next() {
		var image string
		require.NoError(env.t, rows.Scan(&image))
		images = append(images, image)
	}
	require.NoError(env.t, rows.Err())
	del := strings.HasPrefix(strings.TrimSpace(sql), "DELETE")
	var evs []rsEvent
	var pks []string
	for _, image := range images {
		d := json.NewDecoder(strings.NewReader(image))
		d.UseNumber()
		var row rsRow
		require.NoError(env.t, d.Decode(&row))
		pk, _ := rsText(row["id"])
		ev := rsEvent{rel: rel, pk: pk, row: row}
		if del {
			ev.row = nil
		} else if !rsDeps[rel] {
			ev.image = canon(env.t, []byte(image))
			pks = append(pks, pk)
		}
		evs = append(evs, ev)
	}
	if len(pks) > 0 {
		versions := map[string]string{}
		rows, err := b.tx.Query(env.ctx, `SELECT pk, version FROM synchro.row_version WHERE relation_id = $1 AND pk = ANY ($2)`,
			env.relIDs[rel], pks)
		require.NoError(env.t, err)
		for rows.Next() {
			var pk, v string
			require.NoError(env.t, rows.Scan(&pk, &v))
			versions[pk] = v
		}
		require.NoError(env.t, rows.Err())
		for i := range evs {
			if evs[i].row != nil {
				evs[i].version = versions[evs[i].pk]
				require.NotEmpty(env.t, evs[i].version)
			}
		}
	}
	b.events = append(b.events, evs...)
	return len(evs)
}

// push applies one mutation of a task through synchro.push (as client "pusher", with
// the task's current version): an accepted one is a row event like any other.
func (b *rsTx) push(id int, op string, row map[string]any) {
	env := b.env
	env.mut++
	m := map[string]any{"id": fmt.Sprintf("00000000-0000-4000-8000-%012d", env.mut), "table": "tasks", "op": op, "pk": id}
	if op != "insert" {
		var v string
		err := b.tx.QueryRow(env.ctx, `SELECT version FROM synchro.row_version WHERE relation_id = $1 AND pk = $2 AND NOT deleted`,
			env.relIDs["tasks"], strconv.Itoa(id)).Scan(&v)
		if err == pgx.ErrNoRows {
			v = "00000000000000000000000000000000"
		} else {
			require.NoError(env.t, err)
		}
		m["base_version"] = v
	}
	if row != nil {
		m["row"] = row
	}
	var out string
	require.NoError(env.t, b.tx.QueryRow(env.ctx, `SELECT synchro.push('pusher', $1::jsonb)::text`, rsJSON(env.t, []any{m})).Scan(&out))
	var res struct {
		Results []struct {
			Status  string          `json:"status"`
			Version *string         `json:"version"`
			Row     json.RawMessage `json:"row"`
		} `json:"results"`
	}
	require.NoError(env.t, json.Unmarshal([]byte(out), &res))
	require.Len(env.t, res.Results, 1)
	r := res.Results[0]
	if r.Status != "accepted" {
		require.Equal(env.t, "conflict", r.Status, out)
		return
	}
	ev := rsEvent{rel: "tasks", pk: strconv.Itoa(id)}
	if op != "delete" {
		var image string
		require.NoError(env.t, b.tx.QueryRow(env.ctx, `SELECT to_jsonb(x.*)::text FROM tasks x WHERE x.id = $1`, id).Scan(&image))
		d := json.NewDecoder(strings.NewReader(image))
		d.UseNumber()
		require.NoError(env.t, d.Decode(&ev.row))
		ev.image = canon(env.t, []byte(image))
		ev.version = *r.Version
		require.Equal(env.t, ev.image, canon(env.t, r.Row), "push's row is the stored row")
	}
	b.events = append(b.events, ev)
}

func rsJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// ins inserts a whole row (nothing when the key exists).
func (b *rsTx) ins(rel string, row map[string]any) {
	b.run(rel, fmt.Sprintf(`INSERT INTO %[1]s SELECT * FROM jsonb_populate_record(NULL::%[1]s, $1::jsonb)
		ON CONFLICT (id) DO NOTHING RETURNING to_jsonb(%[1]s.*)::text`, rel), rsJSON(b.env.t, row))
}

// upd sets columns of a row (nothing when it is absent).
func (b *rsTx) upd(rel string, pk any, set map[string]any) {
	var cols []string
	for c := range set {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	var assign []string
	for _, c := range cols {
		assign = append(assign, fmt.Sprintf("%[1]s = r.%[1]s", c))
	}
	b.run(rel, fmt.Sprintf(`UPDATE %[1]s x SET %[2]s FROM jsonb_populate_record(NULL::%[1]s, $2::jsonb) r
		WHERE x.id = $1::text::%[3]s RETURNING to_jsonb(x.*)::text`, rel, strings.Join(assign, ", "), rsKeyType[rel]),
		fmt.Sprint(pk), rsJSON(b.env.t, set))
}

func (b *rsTx) del(rel string, pk any) {
	b.run(rel, fmt.Sprintf(`DELETE FROM %[1]s x WHERE x.id = $1::text::%[2]s RETURNING to_jsonb(x.*)::text`, rel, rsKeyType[rel]),
		fmt.Sprint(pk))
}

func rsTask(id int, project any, owner, assignee any, title string) map[string]any {
	return map[string]any{"id": id, "project_id": project, "owner": owner, "assignee": assignee, "title": title, "v": 0}
}

func rsMember(id int, project any, user, role any) map[string]any {
	return map[string]any{"id": id, "project_id": project, "user_id": user, "role": role, "note": "m"}
}

func rsNote(id string, owner any, body string) map[string]any {
	return map[string]any{"id": id, "owner": owner, "body": body}
}

// txn runs body in one source transaction, commits it and applies it to the model.
func (env *rsEnv) txn(body func(b *rsTx)) {
	env.t.Helper()
	b := env.begin()
	defer func() { _ = b.tx.Rollback(env.ctx) }()
	body(b)
	env.commit(b)
}

func (env *rsEnv) begin() *rsTx {
	tx, err := env.db.Pool.Begin(env.ctx)
	require.NoError(env.t, err)
	return &rsTx{env: env, tx: tx}
}

// txnPair runs two overlapping transactions on disjoint keys (a dependency change of
// one can still move the other's rows), their statements interleaved, and commits
// them in a random order: the model applies them in commit order.
func (env *rsEnv) txnPair() {
	b1, b2 := env.begin(), env.begin()
	defer func() { _ = b1.tx.Rollback(env.ctx); _ = b2.tx.Rollback(env.ctx) }()
	env.half = 1
	env.randomStatements(b1, 100)
	env.half = 2
	env.randomStatements(b2, 100)
	env.half = 1
	env.randomStatements(b1, 100)
	env.half = 0
	if env.rng.Intn(2) == 0 {
		b1, b2 = b2, b1
	}
	env.commit(b1)
	env.commit(b2)
}

// pick is a random index below n, in the lower or upper half while env.half says so.
func (env *rsEnv) pick(n int) int {
	h := n / 2
	switch env.half {
	case 1:
		return env.rng.Intn(h)
	case 2:
		return h + env.rng.Intn(n-h)
	}
	return env.rng.Intn(n)
}

func (env *rsEnv) commit(b *rsTx) {
	tx := b.tx
	var xid int64
	require.NoError(env.t, tx.QueryRow(env.ctx, `SELECT pg_current_xact_id()::text::bigint % 4294967296`).Scan(&xid))
	require.NoError(env.t, tx.Commit(env.ctx))
	env.m.apply(rsTxn{xid: xid, events: b.events, newRules: b.newRules, preload: b.preload})
	if b.newRules != nil {
		env.acts = append(env.acts, env.m.txns[len(env.m.txns)-1].changed)
	}
	env.lsns = append(env.lsns, 0)
}

// settle waits until the runner processed everything committed and learns the commit
// LSN of every transaction with events.
func (env *rsEnv) settle() {
	env.t.Helper()
	catchUp(env.t, env.db)
	rows, err := env.db.Pool.Query(env.ctx, `SELECT xid % 4294967296, commit_lsn::text FROM synchro.txn`)
	require.NoError(env.t, err)
	byXid := map[int64]pglogrepl.LSN{}
	for rows.Next() {
		var xid int64
		var l string
		require.NoError(env.t, rows.Scan(&xid, &l))
		lsn, err := pglogrepl.ParseLSN(l)
		require.NoError(env.t, err)
		byXid[xid] = lsn
	}
	require.NoError(env.t, rows.Err())
	for i, tx := range env.m.txns {
		lsn, ok := byXid[tx.xid]
		if len(tx.events) > 0 {
			require.True(env.t, ok, "transaction %d (xid %d, %d events) is materialized", i, tx.xid, len(tx.events))
		}
		if ok {
			env.lsns[i] = lsn
		}
	}
	require.Zero(env.t, countOf(env.t, env.db, `SELECT count(*) FROM synchro.quarantine`), "nothing quarantined")
	if env.squads {
		var c string
		require.NoError(env.t, env.db.Pool.QueryRow(env.ctx, `SELECT coalesce(max(consistent_point)::text, '') FROM synchro.bootstrap b
			JOIN synchro.relation r USING (relation_id) WHERE r.relid = 'squads'::regclass`).Scan(&c))
		require.NotEmpty(env.t, c, "the squads bootstrap is staged once its activation is materialized")
		lsn, err := pglogrepl.ParseLSN(c)
		require.NoError(env.t, err)
		env.m.settleBootstrap(lsn, env.lsns)
	}
}

func (env *rsEnv) pos(e rsEffect) rsPos {
	return rsPos{env.lsns[e.txn], int64(e.ev), int64(e.eff)}
}

// stateAt is the model's state of scope at a transaction_end position: after the last
// transaction whose commit LSN is at or below it.
func (env *rsEnv) stateAt(scope string, p rsPos) replica {
	idx := 0
	for i, l := range env.lsns {
		if l != 0 && l <= p.lsn {
			idx = i + 1
		}
	}
	if p.lsn == 0 {
		idx = 0
	}
	out := replica{}
	for k, v := range env.m.states[idx][scope] {
		out[k] = v
	}
	return out
}

// ---------------------------------------------------------------- clients

type rsClient struct {
	name  string
	reps  map[string]replica
	cur   map[string]string
	pos   map[string]rsPos
	start map[string]rsPos // the rebuild's position
	base  map[string]replica
	acts  map[string]int // len(env.acts) when the scope was rebuilt
	pages int
}

func (env *rsEnv) newClient(name string, scopes []string) *rsClient {
	c := &rsClient{name: name, reps: map[string]replica{}, cur: map[string]string{}, pos: map[string]rsPos{},
		start: map[string]rsPos{}, base: map[string]replica{}, acts: map[string]int{}}
	for _, s := range scopes {
		env.rebuild(c, s)
	}
	return c
}

// rebuild starts scope afresh: a whole rebuild session, equal to the model's state at
// its cursor.
func (env *rsEnv) rebuild(c *rsClient, s string) {
	rows, last := fullRebuild(env.t, env.db, c.name, s, 1+env.rng.Intn(7))
	r := replica{}
	r.applyRebuild(env.t, rows)
	c.reps[s], c.cur[s] = r, last.Cursor
	c.pos[s] = rsCursorPos(env.t, last.Cursor)
	c.start[s] = c.pos[s]
	c.acts[s] = len(env.acts)
	requireReplica(env.t, env.stateAt(s, c.pos[s]), r, fmt.Sprintf("%s: rebuild of %s", c.name, rsShort(s)))
	c.base[s] = replica{}
	for k, v := range r {
		c.base[s][k] = v
	}
}

// refBetween is the model's effects of scope in (from, to], in stream order.
func (env *rsEnv) refBetween(scope string, from, to rsPos) []rsEffect {
	idx := env.m.byScope[scope]
	i := sort.Search(len(idx), func(i int) bool { return from.less(env.pos(env.m.effects[idx[i]])) })
	var out []rsEffect
	for ; i < len(idx); i++ {
		e := env.m.effects[idx[i]]
		require.NotZero(env.t, env.lsns[e.txn], "effects of materialized transactions only")
		if to.less(env.pos(e)) {
			break
		}
		out = append(out, e)
	}
	return out
}

func rsChanges(t *testing.T, cs []change) []string {
	out := []string{}
	for _, c := range cs {
		if c.Op == "delete" {
			out = append(out, fmt.Sprintf("delete %s", c.key()))
		} else {
			out = append(out, fmt.Sprintf("upsert %s %s %s", c.key(), c.Version, canon(t, c.Row)))
		}
	}
	return out
}

func rsRefChanges(es []rsEffect) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.change())
	}
	return out
}

// pull pulls scope to the end in pages of random size; after every page the changes
// are exactly the model's effects between the two cursors, the replica equals the
// model's state at the new cursor, and a has_more cursor is the last change's position.
func (env *rsEnv) pull(c *rsClient, scope string) {
	t := env.t
	t.Helper()
	for _, changed := range env.acts[c.acts[scope]:] {
		if changed[rsPrefixOf(scope)] {
			// The scope's rules changed since its rebuild: its cursor is stale.
			_, err := pullRaw(env.db, c.name, scope, c.cur[scope], 5)
			requireSQLState(t, err, "SY409")
			env.rebuild(c, scope)
			break
		}
	}
	for {
		n := 1 + env.rng.Intn(6)
		if env.rng.Intn(4) == 0 {
			n = 100 + env.rng.Intn(1000)
		}
		p := mustPull(t, env.db, c.name, scope, c.cur[scope], n)
		c.pages++
		to := rsPos{lsn: math.MaxUint64, ev: math.MaxInt32, eff: math.MaxInt32}
		np := rsCursorPos(t, p.Cursor)
		if p.HasMore {
			to = np
		}
		want := env.refBetween(scope, c.pos[scope], to)
		if p.HasMore {
			require.Len(t, p.Changes, n, "%s %s: a has_more page is full", c.name, rsShort(scope))
			require.NotEmpty(t, want, "%s %s: a has_more page after %v to %v: %v", c.name, rsShort(scope), c.pos[scope], np, rsChanges(t, p.Changes))
			require.Equal(t, env.pos(want[len(want)-1]), np, "%s %s: a has_more cursor is the last change's position", c.name, rsShort(scope))
		} else {
			require.False(t, np.less(c.pos[scope]), "cursors never move backwards")
			if len(want) > 0 {
				require.False(t, np.less(env.pos(want[len(want)-1])), "%s %s: the end cursor is past every effect", c.name, rsShort(scope))
			}
		}
		require.Equal(t, rsRefChanges(want), rsChanges(t, p.Changes),
			"%s %s: the page's changes after %v are the model's effects", c.name, rsShort(scope), c.pos[scope])
		c.reps[scope].apply(t, p.Changes)
		c.cur[scope], c.pos[scope] = p.Cursor, np
		if !p.HasMore {
			requireReplica(t, env.stateAt(scope, np), c.reps[scope],
				fmt.Sprintf("%s %s at %v: the replica is the model's state", c.name, rsShort(scope), np))
			return
		}
		// Inside the stream: the rebuild's rows and every model effect up to the cursor.
		fold := replica{}
		for k, v := range c.base[scope] {
			fold[k] = v
		}
		var cs []change
		for _, e := range env.refBetween(scope, c.start[scope], np) {
			ch := change{Table: e.table, PK: json.RawMessage(strconv.Quote(e.pk)), Op: e.op}
			if rsKeyType[e.table] != "text" {
				ch.PK = json.RawMessage(e.pk)
			}
			if e.op == "upsert" {
				ch.Version, ch.Row = e.version, json.RawMessage(e.image)
			}
			cs = append(cs, ch)
		}
		fold.apply(t, cs)
		requireReplica(t, fold, c.reps[scope], fmt.Sprintf("%s %s inside the stream at %v", c.name, rsShort(scope), np))
	}
}

// rebuildDuringWrites rebuilds scope for client c while source transactions commit
// between its pages (pages of one row): rows may arrive in a state newer than the
// session's position P, and pulling from its cursor converges on the model's state
// (CONTRACT.md "Rebuild").
func (env *rsEnv) rebuildDuringWrites(c *rsClient, s string) {
	t := env.t
	var rows []rebuildRow
	session := ""
	for i := 0; ; i++ {
		p := mustRebuildPage(t, env.db, c.name, s, session, 1)
		rows = append(rows, p.Rows...)
		if !p.HasMore {
			r := replica{}
			r.applyRebuild(t, rows)
			c.reps[s], c.cur[s] = r, p.Cursor
			c.pos[s] = rsCursorPos(t, p.Cursor)
			c.start[s] = c.pos[s]
			c.acts[s] = len(env.acts)
			c.base[s] = replica{}
			for k, v := range r {
				c.base[s][k] = v
			}
			return
		}
		session = p.Session
		if i < 6 {
			env.txn(env.randomTxn)
		}
	}
}

// ---------------------------------------------------------------- final checks

// checkStored compares synchro.effect and synchro.membership with the model, and every
// real effect with the memberships before and after its transaction (no effect in a
// scope the row was in neither before nor after; a delete only for a scope left).
func (env *rsEnv) checkStored() {
	t := env.t
	t.Helper()
	txnOf := map[pglogrepl.LSN]int{}
	for i, l := range env.lsns {
		if l != 0 {
			txnOf[l] = i
		}
	}
	line := func(txn int, ev, eff int, scope, table, pk, op, version, image string) string {
		return fmt.Sprintf("t%04d e%d f%d %s %s/%s %s %s %s", txn, ev, eff, rsShort(scope), table, pk, op, version, image)
	}
	var want []string
	for _, e := range env.m.effects {
		want = append(want, line(e.txn, e.ev, e.eff, e.scope, e.table, e.pk, e.op, e.version, e.image))
	}
	rows, err := env.db.Pool.Query(env.ctx, `
		SELECT e.commit_lsn::text, e.event_ordinal, e.effect_ordinal, e.scope, e.table_id, e.pk, e.op,
		       coalesce(e.version, ''), coalesce(e.image::text, '')
		  FROM synchro.effect e`)
	require.NoError(t, err)
	var got []string
	var spurious []string
	for rows.Next() {
		var l, scope, table, pk, op, version, image string
		var ev, eff int
		require.NoError(t, rows.Scan(&l, &ev, &eff, &scope, &table, &pk, &op, &version, &image))
		lsn, err := pglogrepl.ParseLSN(l)
		require.NoError(t, err)
		txn, ok := txnOf[lsn]
		require.True(t, ok, "effect at %s of a known transaction", l)
		if env.m.txns[txn].changed[rsPrefixOf(scope)] {
			continue // the activation's own transaction: unobservable (see rsModel.apply)
		}
		if image != "" {
			image = canon(t, []byte(image))
		}
		got = append(got, line(txn, ev, eff, scope, table, pk, op, version, image))
		before := env.m.memberships[txn][table+"/"+pk][scope]
		after := env.m.memberships[txn+1][table+"/"+pk][scope]
		if (!before && !after) || (op == "delete" && (!before || after)) || (op == "upsert" && !after) {
			spurious = append(spurious, fmt.Sprintf("%s (member before %v, after %v)", line(txn, ev, eff, scope, table, pk, op, "", ""), before, after))
		}
	}
	require.NoError(t, rows.Err())
	sort.Strings(want)
	sort.Strings(got)
	rsRequireLines(t, want, got, "synchro.effect is the model's effects")
	require.Empty(t, spurious, "effects contradicting the memberships before and after their transaction")

	var wantM []string
	for k, scopes := range env.m.member {
		for s := range scopes {
			wantM = append(wantM, rsShort(s)+" "+k)
		}
	}
	gotM := []string{}
	rows, err = env.db.Pool.Query(env.ctx, `SELECT scope, table_id || '/' || pk FROM synchro.membership`)
	require.NoError(t, err)
	for rows.Next() {
		var s, k string
		require.NoError(t, rows.Scan(&s, &k))
		gotM = append(gotM, rsShort(s)+" "+k)
	}
	require.NoError(t, rows.Err())
	sort.Strings(wantM)
	sort.Strings(gotM)
	rsRequireLines(t, wantM, gotM, "synchro.membership is the model's")
}

// rsRequireLines fails with the lines missing and extra (at most 40 of each).
func rsRequireLines(t *testing.T, want, got []string, msg string) {
	t.Helper()
	count := map[string]int{}
	for _, w := range want {
		count[w]++
	}
	for _, g := range got {
		count[g]--
	}
	var missing, extra []string
	for k, n := range count {
		for ; n > 0; n-- {
			missing = append(missing, k)
		}
		for ; n < 0; n++ {
			extra = append(extra, k)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return
	}
	sort.Strings(missing)
	sort.Strings(extra)
	cut := func(xs []string) []string {
		if len(xs) > 40 {
			return append(xs[:40:40], fmt.Sprintf("... %d more", len(xs)-40))
		}
		return xs
	}
	t.Fatalf("%s: %d missing, %d extra (of %d expected)\nmissing:\n  %s\nextra:\n  %s", msg, len(missing), len(extra), len(want),
		strings.Join(cut(missing), "\n  "), strings.Join(cut(extra), "\n  "))
}

// checkRebuilds rebuilds every pullable scope afresh: the model's final state, in
// (table_id, typed key) order, with the contract's checksum.
func (env *rsEnv) checkRebuilds(scopes []string) {
	t := env.t
	t.Helper()
	final := env.m.states[len(env.m.states)-1]
	for _, s := range scopes {
		rows, last := fullRebuild(t, env.db, "rebuilder", s, 1+env.rng.Intn(7))
		r := replica{}
		r.applyRebuild(t, rows)
		requireReplica(t, final[s], r, "a rebuild at the end of "+rsShort(s))
		want := final[s]
		keys := make([]string, 0, len(want))
		for k := range want {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			ti, pi, _ := strings.Cut(keys[i], "/")
			tj, pj, _ := strings.Cut(keys[j], "/")
			if ti != tj {
				return ti < tj
			}
			return rsKeyLess(ti, pi, pj)
		})
		var got []string
		for _, x := range rows {
			got = append(got, x.key())
		}
		if len(keys) > 0 || len(got) > 0 {
			require.Equal(t, keys, got, "rebuild order of %s", rsShort(s))
		}
		h := make([]byte, 32)
		for _, k := range keys {
			table, pk, _ := strings.Cut(k, "/")
			var b bytes.Buffer
			b.Write(h)
			b.WriteString(table)
			b.WriteByte(0)
			b.WriteString(pk)
			b.WriteByte(0)
			b.WriteString(want[k].Version)
			b.WriteByte('\n')
			sum := sha256.Sum256(b.Bytes())
			h = sum[:]
		}
		require.Equal(t, hex.EncodeToString(h), last.Checksum, "checksum of %s", rsShort(s))
	}
}

// ---------------------------------------------------------------- setup

func newRsEnv(t *testing.T, seed int64, baseline string) *rsEnv {
	t.Helper()
	ctx := context.Background()
	e := newSyncEnvSchema(t, rsSchema+"\n"+baseline)
	env := &rsEnv{t: t, ctx: ctx, e: e, db: e.db, m: newRsModel(), rng: rand.New(rand.NewSource(seed)), relIDs: map[string]int64{}}
	for _, rel := range []string{"tasks", "notes", "members", "shares"} {
		env.relIDs[rel] = int64(countOf(t, e.db, `SELECT relation_id::int FROM synchro.relation WHERE relid = $1::regclass`, rel))
	}
	// The baseline rows, as the evaluator's starting state.
	var events []rsEvent
	for _, rel := range []string{"tasks", "notes", "members", "shares"} {
		rows, err := e.db.Pool.Query(ctx, fmt.Sprintf(`SELECT to_jsonb(x.*)::text, coalesce(rv.version, '') FROM %[1]s x
			LEFT JOIN synchro.row_version rv ON rv.relation_id = $1 AND rv.pk = x.id::text`, rel), env.relIDs[rel])
		require.NoError(t, err)
		for rows.Next() {
			var image, version string
			require.NoError(t, rows.Scan(&image, &version))
			d := json.NewDecoder(strings.NewReader(image))
			d.UseNumber()
			var row rsRow
			require.NoError(t, d.Decode(&row))
			pk, _ := rsText(row["id"])
			ev := rsEvent{rel: rel, pk: pk, row: row}
			if !rsDeps[rel] {
				ev.version, ev.image = version, canon(t, []byte(image))
			}
			events = append(events, ev)
		}
		require.NoError(t, rows.Err())
	}
	env.m.baseline(events)
	return env
}

const rsBaseline = `
INSERT INTO members VALUES (1, 1, 'a', 'dev', 'm'), (2, 1, 'b', 'ops', 'm'), (3, 2, 'b', NULL, 'm'), (4, 3, '', '', 'm'),
  (5, 2, 'ü😀', 'dev', 'm'), (6, 4, 'x\y', 'ü😀', 'm');
INSERT INTO tasks VALUES (1, 1, 'a', 'b', 'one', 0), (2, 2, 'c', NULL, 'two', 0), (3, NULL, NULL, NULL, 'none', 0),
  (4, 3, '', 'ü😀', 'four', 0), (5, 1, repeat('ж', 399) || '1', repeat('q', 599) || '2', 'five', 0), (6, 4, 'x\y', 'O''Brien %_', 'six', 0);
INSERT INTO notes VALUES ('n1', 'a', 'x'), ('', 'b', 'empty key'), ('ü', 'ü😀', 'u'), ('n\', '', 'bs');
INSERT INTO shares VALUES (1, 'n1', 'b'), (2, '', 'share'), (3, 'ü', '');`

// ---------------------------------------------------------------- workload

func (env *rsEnv) user() any { return rsUsers[env.rng.Intn(len(rsUsers))] }
func (env *rsEnv) role() any { return rsRoles[env.rng.Intn(len(rsRoles))] }
func (env *rsEnv) project() any {
	if env.rng.Intn(7) == 0 {
		return nil
	}
	return 1 + env.rng.Intn(5) // project 5 has members only sometimes
}

// randomTxn is one random source transaction of 1 to 5 statements, some of them the
// hard shapes: a delete and re-insert of one key, a row moved several times, a
// dependency row deleted and re-inserted or moved several times.
func (env *rsEnv) randomTxn(b *rsTx) { env.randomStatements(b, 100) }

// syncedTxn is randomTxn mostly without dependency changes (one in ten transactions
// has some): long set-based runs in a batch.
func (env *rsEnv) syncedTxn(b *rsTx) {
	if env.rng.Intn(10) == 0 {
		env.randomStatements(b, 100)
	} else {
		env.randomStatements(b, 53)
	}
}

// rsTaskIDs: -10 and -1 order differently as numbers and as text.
var rsTaskIDs = []int{-10, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}

func (env *rsEnv) randomStatements(b *rsTx, kinds int) {
	r := env.rng
	for k := 1 + r.Intn(5); k > 0; k-- {
		tid := rsTaskIDs[env.pick(len(rsTaskIDs))]
		nid := rsNoteIDs[env.pick(len(rsNoteIDs))]
		mid := 1 + env.pick(9)
		switch x := r.Intn(kinds); {
		case x < 10:
			b.ins("tasks", rsTask(tid, env.project(), env.user(), env.user(), fmt.Sprintf("t%d", r.Intn(1000))))
		case x < 22:
			set := map[string]any{"title": fmt.Sprintf("e%d", r.Intn(1000))}
			switch r.Intn(4) {
			case 0:
				set["owner"] = env.user()
			case 1:
				set["assignee"] = env.user()
			case 2:
				set["project_id"] = env.project()
			}
			b.upd("tasks", tid, set)
		case x < 28:
			b.del("tasks", tid)
		case x < 32:
			// Delete and insert again, same key, other values.
			b.del("tasks", tid)
			b.ins("tasks", rsTask(tid, env.project(), env.user(), env.user(), "again"))
		case x < 36:
			// Moved several times in one transaction.
			for j := 2 + r.Intn(3); j > 0; j-- {
				b.upd("tasks", tid, map[string]any{"owner": env.user(), "project_id": env.project()})
			}
		case x < 44:
			b.ins("notes", rsNote(nid, env.user(), "b"))
		case x < 50:
			b.upd("notes", nid, map[string]any{"owner": env.user()})
		case x < 53:
			b.del("notes", nid)
		case x < 62:
			b.ins("members", rsMember(mid, env.project(), env.user(), env.role()))
		case x < 75:
			switch r.Intn(4) {
			case 0:
				b.upd("members", mid, map[string]any{"user_id": env.user()})
			case 1:
				b.upd("members", mid, map[string]any{"project_id": env.project()})
			case 2:
				b.upd("members", mid, map[string]any{"role": env.role()})
			default:
				b.upd("members", mid, map[string]any{"note": fmt.Sprintf("n%d", r.Intn(100))})
			}
		case x < 82:
			b.del("members", mid)
		case x < 86:
			// A dependency row deleted and inserted again in one transaction.
			b.del("members", mid)
			b.ins("members", rsMember(mid, env.project(), env.user(), env.role()))
		case x < 89:
			// A dependency row moved several times in one transaction.
			for j := 2 + r.Intn(3); j > 0; j-- {
				b.upd("members", mid, map[string]any{"project_id": env.project(), "user_id": env.user()})
			}
		case x < 91:
			sid := 1 + env.pick(6)
			switch r.Intn(4) {
			case 0:
				b.ins("shares", map[string]any{"id": sid, "note_id": rsNoteIDs[r.Intn(len(rsNoteIDs))], "user_id": env.user()})
			case 1:
				b.upd("shares", sid, map[string]any{"note_id": rsNoteIDs[r.Intn(len(rsNoteIDs))]})
			case 2:
				b.upd("shares", sid, map[string]any{"user_id": env.user()})
			default:
				b.del("shares", sid)
			}
		case x < 92 && env.squads:
			qid := 1 + env.pick(8)
			switch r.Intn(3) {
			case 0:
				b.ins("squads", map[string]any{"id": qid, "project_id": env.project(), "user_id": rsUsers[r.Intn(5)]})
			case 1:
				b.upd("squads", qid, map[string]any{"user_id": rsUsers[r.Intn(5)], "project_id": env.project()})
			default:
				b.del("squads", qid)
			}
		case x < 93:
			// Changes rolled back to a savepoint are no events.
			b.rolledBack(func() {
				b.upd("members", mid, map[string]any{"user_id": env.user()})
				b.upd("tasks", tid, map[string]any{"owner": env.user()})
				b.del("notes", nid)
			})
		case x < 96:
			switch r.Intn(3) {
			case 0:
				b.push(tid, "insert", map[string]any{"project_id": env.project(), "owner": env.user(), "assignee": env.user(), "title": "pushed"})
			case 1:
				b.push(tid, "update", map[string]any{"owner": env.user(), "title": fmt.Sprintf("pe%d", r.Intn(100))})
			default:
				b.push(tid, "delete", nil)
			}
		default:
			// A synced row and a dependency row it reaches, in either order.
			if r.Intn(2) == 0 {
				b.upd("tasks", tid, map[string]any{"v": r.Intn(100), "project_id": env.project()})
				b.upd("members", mid, map[string]any{"project_id": env.project(), "role": env.role()})
			} else {
				b.upd("members", mid, map[string]any{"user_id": env.user()})
				b.upd("tasks", tid, map[string]any{"owner": env.user()})
			}
		}
	}
}

// scripted are the named scenarios, one or more source transactions each.
func (env *rsEnv) scripted() {
	// Several direct rules on one table: owner and assignee under one prefix (one scope
	// from two rules), assignee under user: next to the via rule of user:.
	env.txn(func(b *rsTx) { b.upd("tasks", 1, map[string]any{"assignee": "a"}) })
	env.txn(func(b *rsTx) { b.ins("tasks", rsTask(7, 1, "b", "b", "seven")) })
	env.txn(func(b *rsTx) { b.upd("tasks", 7, map[string]any{"owner": "c"}) })
	// A row moving between scopes several times in one transaction, ending where it
	// started, and ending elsewhere.
	env.txn(func(b *rsTx) {
		b.upd("tasks", 2, map[string]any{"owner": "a"})
		b.upd("tasks", 2, map[string]any{"owner": "b", "project_id": 1})
		b.upd("tasks", 2, map[string]any{"owner": "c", "project_id": 2})
		b.upd("tasks", 7, map[string]any{"owner": "a"})
		b.upd("tasks", 7, map[string]any{"owner": "ü😀", "assignee": nil})
	})
	// Delete and re-insert of one key in one transaction, and across transactions.
	env.txn(func(b *rsTx) {
		b.del("tasks", 1)
		b.ins("tasks", rsTask(1, 2, "b", nil, "one again"))
		b.del("notes", "n1")
		b.ins("notes", rsNote("n1", "a", "same owner"))
	})
	env.txn(func(b *rsTx) { b.del("tasks", 4) })
	env.txn(func(b *rsTx) { b.ins("tasks", rsTask(4, 3, "c", "", "four again")) })
	env.txn(func(b *rsTx) { b.ins("tasks", rsTask(8, 1, "a", nil, "born")); b.del("tasks", 8) })
	// A dependency change moving rows between scopes, no synced row changing.
	env.txn(func(b *rsTx) { b.upd("members", 1, map[string]any{"user_id": "c"}) })
	// Dependency rows deleted and re-inserted: the same values in one transaction (no
	// effect), other values across transactions.
	env.txn(func(b *rsTx) { b.del("members", 2); b.ins("members", rsMember(2, 1, "b", "ops")) })
	env.txn(func(b *rsTx) { b.del("members", 3) })
	env.txn(func(b *rsTx) { b.ins("members", rsMember(3, 3, "b", "dev")) })
	// A dependency row moved several times in one transaction.
	env.txn(func(b *rsTx) {
		b.upd("members", 5, map[string]any{"project_id": 1})
		b.upd("members", 5, map[string]any{"project_id": 3, "user_id": "a"})
		b.upd("members", 5, map[string]any{"project_id": 2, "user_id": "ü😀"})
	})
	// NULL rule values: a dependency row's via_scope, a synced row's via column, a
	// direct column; and back.
	env.txn(func(b *rsTx) { b.upd("members", 6, map[string]any{"role": nil}) })
	env.txn(func(b *rsTx) { b.upd("members", 6, map[string]any{"project_id": nil}) })
	env.txn(func(b *rsTx) { b.upd("tasks", 6, map[string]any{"project_id": nil, "owner": nil}) })
	env.txn(func(b *rsTx) {
		b.upd("members", 6, map[string]any{"project_id": 4, "role": "ü😀"})
		b.upd("tasks", 6, map[string]any{"project_id": 4})
	})
	// Unusual text: the empty string (scopes "owner:", "user:", "role:"), unicode, a
	// backslash, 400 two-byte characters, 600 characters.
	env.txn(func(b *rsTx) {
		b.ins("tasks", rsTask(9, 3, "", "", "empties"))
		b.ins("notes", rsNote("a b", `x\y`, "bs"))
		b.upd("members", 4, map[string]any{"user_id": rsLong400})
	})
	env.txn(func(b *rsTx) { b.ins("members", rsMember(7, 1, rsLong600, rsLong400)) })
	// A dependency change and a synced-row change in one transaction, both orders.
	env.txn(func(b *rsTx) {
		b.upd("members", 7, map[string]any{"project_id": 2})
		b.upd("tasks", 2, map[string]any{"title": "touched after", "v": 1})
	})
	env.txn(func(b *rsTx) {
		b.upd("tasks", 2, map[string]any{"title": "touched before", "v": 2})
		b.upd("members", 7, map[string]any{"project_id": 1})
	})
	// A dependency event that changes no rule value, after a synced row it reaches.
	env.txn(func(b *rsTx) {
		b.upd("tasks", 5, map[string]any{"title": "five again"})
		b.upd("members", 2, map[string]any{"note": "unregistered"})
	})
	// A synced row deleted in the transaction that moves its dependency.
	env.txn(func(b *rsTx) {
		b.upd("members", 3, map[string]any{"project_id": 2})
		b.del("tasks", 2)
	})
	// A scope whose rows all leave: role:ops holds project 1's tasks through member
	// 2 only; owner:b loses each of its rows.
	env.txn(func(b *rsTx) { b.del("members", 2) })
	env.txn(func(b *rsTx) {
		b.upd("tasks", 1, map[string]any{"owner": "c"})
		b.upd("tasks", 7, map[string]any{"assignee": nil})
		b.upd("notes", "", map[string]any{"owner": "c"})
	})
}

// large: transactions of more than 1,000 row events (the paths that analyze their work
// tables), with dependency events reaching hundreds of rows (effect ordinals in
// canonical order across both tables).
func (env *rsEnv) large(huge bool) {
	env.txn(func(b *rsTx) {
		require.Equal(env.t, 1201, b.many("tasks", `INSERT INTO tasks
			SELECT g, 1 + g % 5, (ARRAY['a', 'b', 'c', '', NULL])[1 + g % 5], (ARRAY['c', NULL, 'ü😀'])[1 + g % 3], 'bulk', 0
			  FROM generate_series(100, 1300) g RETURNING to_jsonb(tasks.*)::text`))
		b.upd("members", 1, map[string]any{"project_id": 2, "user_id": "b"})
		b.many("notes", `INSERT INTO notes SELECT 'bulk' || g, (ARRAY['a', 'b', 'c'])[1 + g % 3], 'x' FROM generate_series(1, 30) g
			RETURNING to_jsonb(notes.*)::text`)
	})
	env.txn(func(b *rsTx) { b.upd("members", 1, map[string]any{"project_id": 3, "user_id": "a"}) })
	env.txn(func(b *rsTx) {
		b.many("tasks", `UPDATE tasks SET owner = CASE WHEN id % 3 = 0 THEN 'a' ELSE owner END, v = v + 1 WHERE id >= 100
			RETURNING to_jsonb(tasks.*)::text`)
		b.many("tasks", `DELETE FROM tasks WHERE id BETWEEN 100 AND 700 RETURNING to_jsonb(tasks.*)::text`)
		b.many("tasks", `INSERT INTO tasks SELECT g, 2, 'b', NULL, 'again', 0 FROM generate_series(100, 400) g
			RETURNING to_jsonb(tasks.*)::text`)
		b.ins("members", rsMember(20, 2, "c", "ops"))
	})
	// More than 5,000 row events (the paths that clear their work tables otherwise).
	env.txn(func(b *rsTx) {
		if !huge {
			return
		}
		require.Equal(env.t, 5200, b.many("tasks", `INSERT INTO tasks
			SELECT g, 1 + g % 4, (ARRAY['a', 'b', 'c', ''])[1 + g % 4], NULL, 'huge', 0
			  FROM generate_series(2000, 7199) g RETURNING to_jsonb(tasks.*)::text`))
		b.upd("members", 1, map[string]any{"user_id": "ü😀"})
	})
	env.txn(func(b *rsTx) {
		b.del("members", 20)
		b.many("tasks", `DELETE FROM tasks WHERE id >= 100 RETURNING to_jsonb(tasks.*)::text`)
		b.many("notes", `DELETE FROM notes WHERE id LIKE 'bulk%' RETURNING to_jsonb(notes.*)::text`)
	})
}

// bootstrap: a dependency that already holds rows joins the registry with a new rule
// (squad:), between row events of one transaction, while transactions keep coming: the
// projection bootstrap stages its rows under an exported snapshot and merges them at
// the first transaction end at or after its consistent point (docs/bootstrap.md).
// Until then squad: is not incremental (its cursors are stale, its rebuild waits);
// afterwards its effects are the model's like any other prefix's, and the other
// prefixes' cursors and effects go on throughout.
func (env *rsEnv) bootstrap(between func()) {
	t := env.t
	mustExec(t, env.db, `CREATE TABLE squads (id int8 PRIMARY KEY, project_id int8, user_id text);
		INSERT INTO squads VALUES (1, 1, 'a'), (2, 2, 'c'), (3, 1, ''), (4, 3, 'ü😀'), (5, NULL, 'a'), (6, 2, NULL), (7, 4, 'b');`)
	pre := map[string]rsRow{}
	rows, err := env.db.Pool.Query(env.ctx, `SELECT to_jsonb(x.*)::text FROM squads x`)
	require.NoError(t, err)
	for rows.Next() {
		var image string
		require.NoError(t, rows.Scan(&image))
		d := json.NewDecoder(strings.NewReader(image))
		d.UseNumber()
		var row rsRow
		require.NoError(t, d.Decode(&row))
		pk, _ := rsText(row["id"])
		pre[pk] = row
	}
	require.NoError(t, rows.Err())
	rules := append(append([]rsRule{}, env.m.rules...),
		rsRule{table: "tasks", prefix: "squad:", col: "project_id", via: true, dep: "squads", match: "project_id", scopeCol: "user_id"})
	env.m.pending = map[string]bool{"squad:": true}
	env.m.pendingRel = map[string]bool{"squads": true}
	env.txn(func(b *rsTx) {
		b.upd("tasks", 1, map[string]any{"title": "before the bootstrap's activation"})
		b.activate(`
			SELECT synchro.register_dependency('squads');
			SELECT synchro.add_scope_rule('tasks', 'squad:', 'project_id', 'squads', 'project_id', 'user_id');
			SELECT synchro.activate_registry();`, rules)
		b.preload = map[string]map[string]rsRow{"squads": pre}
		b.upd("squads", 1, map[string]any{"user_id": "b"})
		b.upd("tasks", 2, map[string]any{"title": "after the bootstrap's activation"})
	})
	require.Equal(t, map[string]bool{"squad:": true}, env.acts[len(env.acts)-1])
	env.squads = true
	between()
	eventually(t, 60*time.Second, "the squads bootstrap to merge", func() bool {
		return countOf(t, env.db, `SELECT count(*) FROM synchro.bootstrap WHERE merged_at IS NULL`) == 0
	})
	env.settle()
	env.m.pending, env.m.pendingRel = nil, nil
}

// ---------------------------------------------------------------- the test

// TestSemanticsModel: against the evaluator, on a baseline of rows with unusual
// values: the scripted scenarios (scripted); random transactions with the runner live
// (rows and dependency rows deleted and re-inserted, moved several times, changed
// together, rolled back to savepoints, pushes, overlapping transactions committed out
// of start order), client A pulling a random subset of scopes every few transactions
// in pages of random size, client C rebuilding while transactions commit between its
// pages; transactions of 1,200 to 5,200 row events; a registry activation between row
// events of one transaction (a prefix removed, one added, one changed, two kept); a
// dependency holding rows joining with a new rule (projection bootstrap) while
// transactions keep coming; a backlog materialized in the batches the seed picks
// (one or two apply sessions, batches of 3 or of everything); and client B, which
// rebuilt every scope before the first transaction and pulls only at the end. Then the
// stored effects and memberships and fresh rebuilds (see the file's comment).
func TestSemanticsModel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	seed := rsSeed(t)
	env := newRsEnv(t, seed, rsBaseline)
	var pullable []string
	for _, s := range rsScopes() {
		if rsPullable(s) {
			pullable = append(pullable, s)
		}
	}
	a := env.newClient("client-a", pullable)
	b := env.newClient("client-b", pullable)
	cc := env.newClient("client-c", nil)
	rebuildC := func() {
		s := pullable[env.rng.Intn(len(pullable))]
		env.rebuildDuringWrites(cc, s)
		env.settle()
		env.pull(cc, s)
	}

	pullSome := func() {
		env.settle()
		for _, s := range pullable {
			if env.m.pending[rsPrefixOf(s)] {
				continue
			}
			if env.rng.Intn(2) == 0 {
				env.pull(a, s)
			}
		}
	}
	env.scripted()
	pullSome()
	for _, s := range pullable {
		env.pull(a, s)
	}
	// The scope whose rows all left is empty for the client, and was not before.
	require.NotEmpty(t, env.m.states[0]["role:ops"])
	require.Empty(t, a.reps["role:ops"], "role:ops: every row left")
	t.Logf("scripted: %d transactions, %d effects (%s)", len(env.m.txns), len(env.m.effects), time.Since(start))

	// Live: random transactions (one in four a pair of overlapping ones committed in a
	// random order), pulls between, and client C rebuilding while transactions commit.
	// -short (CI) runs a third of each random phase; make test runs them whole.
	live, phase := 120, 30
	if testing.Short() {
		live, phase = 40, 10
	}
	for i := 0; i < live; i++ {
		if env.rng.Intn(4) == 0 {
			env.txnPair()
		} else {
			env.txn(env.randomTxn)
		}
		if env.rng.Intn(3) == 0 {
			pullSome()
		}
		if i%10 == 0 {
			rebuildC()
		}
	}
	pullSome()
	env.large(true)
	pullSome()
	t.Logf("live: %d transactions, %d effects (%s)", len(env.m.txns), len(env.m.effects), time.Since(start))

	// A registry activation between row events of one transaction: team: loses its
	// rule, rev: is new (a via rule through a column no via rule used), owner: gains a
	// notes rule; user: and role: keep theirs (their cursors stay valid).
	var newRules []rsRule
	for _, r := range rsRules {
		if r.prefix != "team:" {
			newRules = append(newRules, r)
		}
	}
	newRules = append(newRules, rsRule{table: "tasks", prefix: "rev:", col: "assignee", via: true, match: "user_id", scopeCol: "role"},
		rsRule{table: "notes", prefix: "owner:", col: "body"})
	env.txn(func(b *rsTx) {
		b.upd("tasks", 3, map[string]any{"assignee": "b", "title": "before the activation"})
		b.upd("members", 1, map[string]any{"role": "ops"})
		b.activate(`
			SELECT synchro.remove_scope_rules('tasks');
			SELECT synchro.add_scope_rule('tasks', 'owner:', 'owner');
			SELECT synchro.add_scope_rule('tasks', 'owner:', 'assignee');
			SELECT synchro.add_scope_rule('tasks', 'user:', 'assignee');
			SELECT synchro.add_scope_rule('tasks', 'user:', 'project_id', 'members', 'project_id', 'user_id');
			SELECT synchro.add_scope_rule('tasks', 'role:', 'project_id', 'members', 'project_id', 'role');
			SELECT synchro.add_scope_rule('tasks', 'rev:', 'assignee', 'members', 'user_id', 'role');
			SELECT synchro.add_scope_rule('notes', 'owner:', 'body');
			SELECT synchro.activate_registry();`, newRules)
		b.upd("tasks", 5, map[string]any{"assignee": "a"})
		b.upd("members", 3, map[string]any{"user_id": "a"})
		b.upd("notes", "n1", map[string]any{"body": "b"})
	})
	require.Equal(t, map[string]bool{"team:": true, "rev:": true, "owner:": true}, env.acts[0])
	pullSome()
	for i := 0; i < phase; i++ {
		env.txn(env.randomTxn)
		if env.rng.Intn(3) == 0 {
			pullSome()
		}
	}
	pullSome()
	t.Logf("activation: %d transactions, %d effects (%s)", len(env.m.txns), len(env.m.effects), time.Since(start))

	env.bootstrap(func() {
		for i := 0; i < phase; i++ {
			env.txn(env.randomTxn)
			if i%10 == 9 {
				pullSome()
			}
		}
	})
	pullSome()
	for i := 0; i < phase; i++ {
		env.txn(env.randomTxn)
		if env.rng.Intn(3) == 0 {
			pullSome()
		}
	}
	pullSome()
	t.Logf("bootstrap: %d transactions, %d effects (%s)", len(env.m.txns), len(env.m.effects), time.Since(start))

	// A backlog, materialized in the batches the seed picks.
	env.e.stopRunner(t)
	for i := 0; i < 200; i++ {
		env.txn(env.syncedTxn)
		if i == 100 {
			env.large(false)
		}
	}
	// The batching follows the seed: one or two apply sessions, batches of 3 or of
	// everything.
	cfg := env.e.cfg
	cfg.ApplySessions = 1 + int(uint64(seed)%2)
	cfg.BatchTxns = []int{10000, 3}[uint64(seed)/2%2]
	cfg.BatchEvents = 1000000
	cfg.BatchDelay = time.Hour
	env.e.cfg = cfg
	env.e.startRunner(t)
	pullSome()
	batches, batched := env.e.rr.histogram(t, "synchro_runner_batch_transactions")
	t.Logf("backlog: %d apply sessions, batches of up to %d: %d batches for %.0f transactions, %.0f prepared, %.0f fallbacks",
		cfg.ApplySessions, cfg.BatchTxns, batches, batched, env.e.rr.counter(t, "synchro_runner_batches_prepared_total"),
		env.e.rr.counter(t, "synchro_runner_batch_fallbacks_total"))
	for i := 0; i < 40; i++ {
		env.txn(env.randomTxn)
		if env.rng.Intn(4) == 0 {
			pullSome()
		}
	}
	env.settle()
	t.Logf("backlog and live: %d transactions, %d effects (%s)", len(env.m.txns), len(env.m.effects), time.Since(start))

	for _, s := range pullable {
		env.pull(a, s)
		env.pull(b, s)
	}
	var cs []string
	for s := range cc.cur {
		cs = append(cs, s)
	}
	sort.Strings(cs)
	for _, s := range cs {
		env.pull(cc, s)
	}
	env.checkStored()
	env.checkRebuilds(pullable)
	t.Logf("%d transactions, %d effects, %d scopes; client A %d pages, client B %d pages (%s)",
		len(env.m.txns), len(env.m.effects), len(pullable), a.pages, b.pages, time.Since(start))
}

// TestSemanticsModelScenarios: the named scenarios with their pull changes written out
// by hand (an independent check of the evaluator's reading of the contract): several
// direct rules putting a row in one scope, a row moved several times in one
// transaction, a delete and re-insert of one key in one transaction, a dependency row
// deleted and re-inserted with the same values (no effect anywhere), a dependency
// change and a synced-row change in one transaction (the effects belong to the later
// event), NULL rule values, and a scope whose rows all leave (empty rebuild, checksum
// h0).
func TestSemanticsModelScenarios(t *testing.T) {
	t.Parallel()
	e := newSyncEnvSchema(t, rsSchema)
	db := e.db
	scopes := []string{"owner:a", "owner:b", "owner:c", "user:a", "user:y", "user:z", "role:r", "team:9"}
	cur := map[string]string{}
	for _, s := range scopes {
		var rep replica
		rep, cur[s] = startScope(t, db, "scenarios", s)
		require.Empty(t, rep)
	}
	pullEach := func() map[string][]string {
		out := map[string][]string{}
		for _, s := range scopes {
			changes, next := pullAll(t, db, "scenarios", s, cur[s], 2)
			cur[s] = next
			if len(changes) > 0 {
				out[s] = opsOf(changes)
			}
		}
		return out
	}
	effectsOf := func(xid int64) []string {
		return reviewLines(t, db, `SELECT e.scope || ' e' || e.event_ordinal || ' f' || e.effect_ordinal || ' ' || e.op || ' ' || e.pk
			FROM synchro.effect e JOIN synchro.txn x USING (stream_generation, commit_lsn) WHERE x.xid % 4294967296 = $1`, xid)
	}

	t.Run("TwoDirectRulesOneScope", func(t *testing.T) {
		write(t, db, `INSERT INTO tasks VALUES (50, NULL, 'a', 'a', 'fifty', 0)`)
		require.Equal(t, map[string][]string{"owner:a": {"upsert:tasks/50"}, "user:a": {"upsert:tasks/50"}}, pullEach())
		write(t, db, `UPDATE tasks SET assignee = NULL WHERE id = 50`)
		require.Equal(t, map[string][]string{"owner:a": {"upsert:tasks/50"}, "user:a": {"delete:tasks/50"}}, pullEach(),
			"still in owner:a through its owner: an upsert, no delete")
		write(t, db, `UPDATE tasks SET owner = 'b' WHERE id = 50`)
		require.Equal(t, map[string][]string{"owner:a": {"delete:tasks/50"}, "owner:b": {"upsert:tasks/50"}}, pullEach())
	})
	t.Run("MovedSeveralTimesInOneTransaction", func(t *testing.T) {
		write(t, db, `UPDATE tasks SET owner = 'a' WHERE id = 50; UPDATE tasks SET owner = 'c' WHERE id = 50;
			UPDATE tasks SET owner = 'b' WHERE id = 50`)
		require.Equal(t, map[string][]string{"owner:b": {"upsert:tasks/50"}}, pullEach(),
			"back where it started: one upsert there, nothing in the scopes it passed through")
	})
	t.Run("DeleteAndReinsertInOneTransaction", func(t *testing.T) {
		write(t, db, `DELETE FROM tasks WHERE id = 50; INSERT INTO tasks VALUES (50, NULL, 'c', NULL, 'again', 0)`)
		require.Equal(t, map[string][]string{"owner:b": {"delete:tasks/50"}, "owner:c": {"upsert:tasks/50"}}, pullEach())
	})
	t.Run("DependencyReinsertedWithSameValues", func(t *testing.T) {
		write(t, db, `INSERT INTO members VALUES (60, 9, 'z', 'r', 'm'); INSERT INTO tasks VALUES (51, 9, NULL, NULL, 'p9', 0)`)
		require.Equal(t, map[string][]string{"user:z": {"upsert:tasks/51"}, "role:r": {"upsert:tasks/51"}}, pullEach())
		before := countOf(t, db, `SELECT count(*) FROM synchro.effect`)
		write(t, db, `DELETE FROM members WHERE id = 60; INSERT INTO members VALUES (60, 9, 'z', 'r', 'other note')`)
		require.Equal(t, map[string][]string{}, pullEach())
		require.Equal(t, before, countOf(t, db, `SELECT count(*) FROM synchro.effect`), "no effect in any scope")
	})
	t.Run("DependencyAndRowInOneTransaction", func(t *testing.T) {
		xid := commitXid(t, db, `UPDATE tasks SET title = 'touched' WHERE id = 51; UPDATE members SET user_id = 'y' WHERE id = 60`)
		waitXid(t, db, xid)
		require.Equal(t, map[string][]string{"user:z": {"delete:tasks/51"}, "user:y": {"upsert:tasks/51"}, "role:r": {"upsert:tasks/51"}}, pullEach())
		require.Equal(t, []string{"role:r e1 f0 upsert 51", "user:y e1 f0 upsert 51", "user:z e1 f0 delete 51"}, effectsOf(xid),
			"each effect belongs to the last event that impacted the row (the dependency's)")
		// A dependency event that changes no rule value (members.note is not
		// registered) after the row's own event: the row's effects belong to it.
		xid = commitXid(t, db, `UPDATE tasks SET title = 'again' WHERE id = 51; UPDATE members SET note = 'n' WHERE id = 60`)
		waitXid(t, db, xid)
		require.Equal(t, []string{"role:r e1 f0 upsert 51", "user:y e1 f0 upsert 51"}, effectsOf(xid))
		require.Equal(t, map[string][]string{"user:y": {"upsert:tasks/51"}, "role:r": {"upsert:tasks/51"}}, pullEach())
	})
	t.Run("NullRuleValues", func(t *testing.T) {
		write(t, db, `UPDATE members SET user_id = NULL WHERE id = 60`)
		require.Equal(t, map[string][]string{"user:y": {"delete:tasks/51"}}, pullEach())
		write(t, db, `UPDATE members SET user_id = 'y' WHERE id = 60; UPDATE tasks SET project_id = NULL WHERE id = 51`)
		require.Equal(t, map[string][]string{"role:r": {"delete:tasks/51"}}, pullEach(),
			"user:y: in it neither before nor after, no effect")
	})
	t.Run("ScopeWhoseRowsAllLeave", func(t *testing.T) {
		write(t, db, `INSERT INTO tasks VALUES (52, NULL, 'c', 'c', 'x', 0), (53, 9, NULL, 'c', 'y', 0)`)
		require.Equal(t, map[string][]string{"owner:c": {"upsert:tasks/52", "upsert:tasks/53"}, "user:y": {"upsert:tasks/53"},
			"role:r": {"upsert:tasks/53"}}, pullEach())
		write(t, db, `UPDATE tasks SET owner = 'a' WHERE id = 50; DELETE FROM tasks WHERE id = 52; UPDATE tasks SET assignee = NULL WHERE id = 53`)
		require.Equal(t, map[string][]string{"owner:a": {"upsert:tasks/50"}, "owner:c": {"delete:tasks/50", "delete:tasks/52", "delete:tasks/53"},
			"user:y": {"upsert:tasks/53"}, "role:r": {"upsert:tasks/53"}}, pullEach())
		rows, last := fullRebuild(t, db, "scenarios", "owner:c", 5)
		require.Empty(t, rows)
		require.Equal(t, strings.Repeat("0", 64), last.Checksum, "an empty scope's checksum is h0")
	})
}
