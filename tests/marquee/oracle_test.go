package marquee

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The oracle compares what committed (marquee_audit, written by triggers in the source
// transactions themselves) with what the stream materialized (synchro.txn, event,
// effect), and an independent model of the scope rules with the effects.

// auditRow is one committed row change.
type auditRow struct {
	Xid int64
	Rel string
	PK  string
	Op  string
	New map[string]any // nil for a delete
}

type txnRow struct {
	Xid        int64
	CommitLSN  pglogrepl.LSN
	EventCount int
}

type eventRow struct {
	CommitLSN pglogrepl.LSN
	Ordinal   int
	Rel, PK   string
	Op        string
}

type effectRow struct {
	Scope     string
	CommitLSN pglogrepl.LSN
	Event     int
	Effect    int
	Table, PK string
	Op        string
}

func (e effectRow) key() string {
	return fmt.Sprintf("%s|%s|%d|%s|%s|%s", e.Scope, e.CommitLSN, e.Event, e.Table, e.PK, e.Op)
}

// verdict is the oracle's result.
type verdict struct {
	sourceTxns   int // committed source transactions with a row change (audit)
	sourceEvents int
	effects      int
	loss         int
	dups         int
	problems     []string
	kinds        map[string]int // problems by kind
}

// fail records a problem: at most 15 of each kind (by format), so one kind does not
// hide the others.
func (v *verdict) fail(format string, args ...any) {
	if v.kinds == nil {
		v.kinds = map[string]int{}
	}
	v.kinds[format]++
	if v.kinds[format] <= 15 {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

func decodeJSON(b []byte) (map[string]any, error) {
	if b == nil {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	return m, d.Decode(&m)
}

func lsn(s string) pglogrepl.LSN {
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		panic(err)
	}
	return l
}

// collect reads the audit and the materialized stream.
func collect(ctx context.Context, conn *pgx.Conn) (audit map[int64][]auditRow, txns []txnRow, events map[pglogrepl.LSN][]eventRow,
	effects []effectRow, err error) {
	audit = map[int64][]auditRow{}
	rows, err := conn.Query(ctx, `SELECT xid, rel, pk, op, new::text FROM marquee_audit ORDER BY seq`)
	if err != nil {
		return
	}
	for rows.Next() {
		var a auditRow
		var img *string
		if err = rows.Scan(&a.Xid, &a.Rel, &a.PK, &a.Op, &img); err != nil {
			return
		}
		if img != nil {
			if a.New, err = decodeJSON([]byte(*img)); err != nil {
				return
			}
		}
		audit[a.Xid] = append(audit[a.Xid], a)
	}
	if err = rows.Err(); err != nil {
		return
	}
	// Ordered by the pg_lsn column, qualified: a bare "commit_lsn" in ORDER BY names
	// the output column commit_lsn::text, whose order breaks once LSNs pass
	// 0/10000000 (a full-size run does). sortStream orders again in Go.
	rows, err = conn.Query(ctx, `SELECT t.xid % 4294967296, t.commit_lsn::text, t.event_count FROM synchro.txn t
		WHERE t.stream_generation = (SELECT stream_generation FROM synchro.progress) ORDER BY t.commit_lsn`)
	if err != nil {
		return
	}
	for rows.Next() {
		var t txnRow
		var c string
		if err = rows.Scan(&t.Xid, &c, &t.EventCount); err != nil {
			return
		}
		t.CommitLSN = lsn(c)
		txns = append(txns, t)
	}
	if err = rows.Err(); err != nil {
		return
	}
	events = map[pglogrepl.LSN][]eventRow{}
	rows, err = conn.Query(ctx, `SELECT e.commit_lsn::text, e.event_ordinal, r.table_name, e.pk, e.op
		FROM synchro.event e JOIN synchro.relation r USING (relation_id)
		WHERE e.stream_generation = (SELECT stream_generation FROM synchro.progress) ORDER BY e.commit_lsn, e.event_ordinal`)
	if err != nil {
		return
	}
	for rows.Next() {
		var e eventRow
		var c string
		if err = rows.Scan(&c, &e.Ordinal, &e.Rel, &e.PK, &e.Op); err != nil {
			return
		}
		e.CommitLSN = lsn(c)
		events[e.CommitLSN] = append(events[e.CommitLSN], e)
	}
	if err = rows.Err(); err != nil {
		return
	}
	rows, err = conn.Query(ctx, `SELECT f.scope, f.commit_lsn::text, f.event_ordinal, f.effect_ordinal, f.table_id, f.pk, f.op
		FROM synchro.effect f WHERE f.stream_generation = (SELECT stream_generation FROM synchro.progress)
		ORDER BY f.scope COLLATE "C", f.commit_lsn, f.event_ordinal, f.effect_ordinal`)
	if err != nil {
		return
	}
	for rows.Next() {
		var e effectRow
		var c string
		if err = rows.Scan(&e.Scope, &c, &e.Event, &e.Effect, &e.Table, &e.PK, &e.Op); err != nil {
			return
		}
		e.CommitLSN = lsn(c)
		effects = append(effects, e)
	}
	if err = rows.Err(); err != nil {
		return
	}
	sortStream(txns, effects)
	return
}

// sortStream puts transactions in commit order and effects in stream-position order
// per scope (scope, commit LSN, event, effect), comparing LSNs as numbers.
func sortStream(txns []txnRow, effects []effectRow) {
	sort.SliceStable(txns, func(i, j int) bool { return txns[i].CommitLSN < txns[j].CommitLSN })
	sort.SliceStable(effects, func(i, j int) bool {
		a, b := effects[i], effects[j]
		switch {
		case a.Scope != b.Scope:
			return a.Scope < b.Scope
		case a.CommitLSN != b.CommitLSN:
			return a.CommitLSN < b.CommitLSN
		case a.Event != b.Event:
			return a.Event < b.Event
		}
		return a.Effect < b.Effect
	})
}

// model is the scope rules applied to the committed row images, in commit order.
type model struct {
	rows       map[string]map[string]map[string]any // rel -> pk -> image
	membership map[string]map[string]bool           // rel/pk -> scopes
}

func newModel(initial map[string]map[string]map[string]any) *model {
	m := &model{rows: initial, membership: map[string]map[string]bool{}}
	for rel, rs := range m.rows {
		if rel == "project_members" {
			continue
		}
		for pk := range rs {
			m.membership[rel+"/"+pk] = m.scopes(rel, pk)
		}
	}
	return m
}

func text(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	default:
		return fmt.Sprint(x), true
	}
}

// scopes: owner:<owner> for every synced table; user:<user_id> of every membership of
// a task's project.
func (m *model) scopes(rel, pk string) map[string]bool {
	out := map[string]bool{}
	r, ok := m.rows[rel][pk]
	if !ok {
		return out
	}
	if o, ok := text(r["owner"]); ok {
		out["owner:"+o] = true
	}
	if rel == "tasks" {
		if p, ok := text(r["project_id"]); ok {
			for _, mr := range m.rows["project_members"] {
				if q, _ := text(mr["project_id"]); q == p {
					u, _ := text(mr["user_id"])
					out["user:"+u] = true
				}
			}
		}
	}
	return out
}

// apply runs one committed source transaction and returns its expected effects.
func (m *model) apply(clsn pglogrepl.LSN, rows []auditRow) []effectRow {
	touched := map[string]int{} // rel/pk of synced rows -> last ordinal
	depvals := map[string]int{} // project_id value -> highest ordinal of a membership change with it
	depLast := map[string]int{} // member pk -> last ordinal
	depOld := map[string]string{}
	for i, a := range rows {
		if a.Rel == "project_members" {
			if _, seen := depLast[a.PK]; !seen {
				if old, ok := m.rows[a.Rel][a.PK]; ok {
					depOld[a.PK], _ = text(old["project_id"])
				} else {
					depOld[a.PK] = "\x00none"
				}
			}
			depLast[a.PK] = i
		} else {
			touched[a.Rel+"/"+a.PK] = i
		}
		if m.rows[a.Rel] == nil {
			m.rows[a.Rel] = map[string]map[string]any{}
		}
		if a.Op == "delete" {
			delete(m.rows[a.Rel], a.PK)
		} else {
			m.rows[a.Rel][a.PK] = a.New
		}
	}
	for pk, ord := range depLast {
		vals := []string{depOld[pk]}
		if r, ok := m.rows["project_members"][pk]; ok {
			v, _ := text(r["project_id"])
			vals = append(vals, v)
		}
		for _, v := range vals {
			if o, ok := depvals[v]; !ok || ord > o {
				depvals[v] = ord
			}
		}
	}
	impacted := map[string]int{}
	for k, ord := range touched {
		impacted[k] = ord
	}
	if len(depvals) > 0 {
		for pk, r := range m.rows["tasks"] {
			p, ok := text(r["project_id"])
			if !ok {
				continue
			}
			if ord, hit := depvals[p]; hit {
				k := "tasks/" + pk
				if o, ok := impacted[k]; !ok || ord > o {
					impacted[k] = ord
				}
			}
		}
	}
	var out []effectRow
	for k, ord := range impacted {
		rel, pk, _ := strings.Cut(k, "/")
		_, isTouched := touched[k]
		old := m.membership[k]
		now := m.scopes(rel, pk)
		for s := range now {
			if isTouched || !old[s] {
				out = append(out, effectRow{Scope: s, CommitLSN: clsn, Event: ord, Table: rel, PK: pk, Op: "upsert"})
			}
		}
		for s := range old {
			if !now[s] {
				out = append(out, effectRow{Scope: s, CommitLSN: clsn, Event: ord, Table: rel, PK: pk, Op: "delete"})
			}
		}
		if len(now) == 0 {
			delete(m.membership, k)
		} else {
			m.membership[k] = now
		}
	}
	return out
}

// judge runs every check of the oracle.
func judge(audit map[int64][]auditRow, txns []txnRow, events map[pglogrepl.LSN][]eventRow, effects []effectRow,
	initial map[string]map[string]map[string]any) verdict {
	var v verdict
	v.sourceTxns = len(audit)
	for _, rs := range audit {
		v.sourceEvents += len(rs)
	}
	v.effects = len(effects)

	// Transactions: every committed source transaction exactly once.
	byXid := map[int64][]txnRow{}
	for _, t := range txns {
		byXid[t.Xid] = append(byXid[t.Xid], t)
	}
	for xid := range audit {
		switch n := len(byXid[xid]); {
		case n == 0:
			v.loss++
			v.fail("source transaction xid %d (%d row changes) was never materialized", xid, len(audit[xid]))
		case n > 1:
			v.dups += n - 1
			v.fail("source transaction xid %d materialized %d times", xid, n)
		}
	}
	// Events: each (transaction, event) identity exactly once, in source order.
	for _, t := range txns {
		got := events[t.CommitLSN]
		want := audit[t.Xid]
		if len(got) != t.EventCount {
			v.fail("txn %s records %d events, holds %d", t.CommitLSN, t.EventCount, len(got))
		}
		for i := range max(len(got), len(want)) {
			switch {
			case i >= len(got):
				v.loss++
				v.fail("txn %s (xid %d): event %d (%s %s %s) missing", t.CommitLSN, t.Xid, i, want[i].Rel, want[i].PK, want[i].Op)
			case i >= len(want):
				v.dups++
				v.fail("txn %s (xid %d): event %d (%s %s %s) not committed at the source", t.CommitLSN, t.Xid, i, got[i].Rel, got[i].PK, got[i].Op)
			case got[i].Ordinal != i || got[i].Rel != want[i].Rel || got[i].PK != want[i].PK || got[i].Op != want[i].Op:
				v.fail("txn %s (xid %d): event %d is %d %s %s %s, the source's was %s %s %s", t.CommitLSN, t.Xid, i,
					got[i].Ordinal, got[i].Rel, got[i].PK, got[i].Op, want[i].Rel, want[i].PK, want[i].Op)
			}
		}
	}
	// Effects: the model's expected scope effects, each present exactly once.
	m := newModel(initial)
	want := map[string]int{}
	for _, t := range txns {
		if rs, ok := audit[t.Xid]; ok {
			for _, e := range m.apply(t.CommitLSN, rs) {
				want[e.key()]++
			}
		}
	}
	got := map[string]int{}
	for _, e := range effects {
		got[e.key()]++
	}
	for k, n := range want {
		if got[k] < n {
			v.loss += n - got[k]
			v.fail("expected effect %s missing", k)
		}
	}
	for k, n := range got {
		if n > want[k] {
			v.dups += n - want[k]
			v.fail("effect %s present %d times, expected %d", k, n, want[k])
		}
	}
	// Positions per scope: strictly increasing in stream order, effect ordinals
	// 0, 1, ... within each (event, scope), every effect inside a materialized
	// transaction and one of its events.
	txnAt := map[pglogrepl.LSN]txnRow{}
	for _, t := range txns {
		txnAt[t.CommitLSN] = t
	}
	for i, e := range effects {
		t, ok := txnAt[e.CommitLSN]
		if !ok || e.Event < 0 || e.Event >= t.EventCount {
			v.fail("effect %s outside any materialized event", e.key())
		}
		var prev *effectRow
		if i > 0 && effects[i-1].Scope == e.Scope {
			prev = &effects[i-1]
		}
		switch {
		case prev == nil || prev.CommitLSN != e.CommitLSN || prev.Event != e.Event:
			if e.Effect != 0 {
				v.fail("effect %s: the first effect of its event in its scope has ordinal %d", e.key(), e.Effect)
			}
			if prev != nil && (prev.CommitLSN > e.CommitLSN || prev.CommitLSN == e.CommitLSN && prev.Event >= e.Event) {
				v.fail("scope %s: positions not increasing at %s", e.Scope, e.key())
			}
		case e.Effect != prev.Effect+1:
			v.fail("effect %s: ordinal %d after %d", e.key(), e.Effect, prev.Effect)
		}
	}
	sort.Strings(v.problems)
	return v
}

// slotSampler watches the slot and durable progress throughout the run: the slot's
// confirmed_flush_lsn is read first, durable progress afterwards (so progress can only
// have moved forward in between), and the slot must never be ahead of it; durable
// progress never moves backwards, PostgreSQL crashes included.
type slotSampler struct {
	url, slot string

	mu         sync.Mutex
	samples    int
	violations []string
	maxDurable pglogrepl.LSN
}

func (s *slotSampler) run(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := pgx.Connect(cctx, s.url)
			cancel()
			if err != nil {
				sleep(ctx, 50*time.Millisecond)
				continue
			}
			conn = c
		}
		if err := s.sample(ctx, conn); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

func (s *slotSampler) sample(ctx context.Context, conn *pgx.Conn) error {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var slot *string
	err := conn.QueryRow(qctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, s.slot).Scan(&slot)
	if err == pgx.ErrNoRows {
		return nil
	}
	if err != nil {
		return err
	}
	var processed string
	err = conn.QueryRow(qctx, `SELECT processed_end_lsn::text FROM synchro.progress`).Scan(&processed)
	if err == pgx.ErrNoRows || slot == nil {
		return nil // no stream yet (a first start in progress)
	}
	if err != nil {
		return err
	}
	sl, p := lsn(*slot), lsn(processed)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if sl > p && len(s.violations) < 20 {
		s.violations = append(s.violations, fmt.Sprintf("slot confirmed_flush_lsn %s ahead of durable processed_end_lsn %s", sl, p))
	}
	if p < s.maxDurable && len(s.violations) < 20 {
		s.violations = append(s.violations, fmt.Sprintf("durable processed_end_lsn went back from %s to %s", s.maxDurable, p))
	}
	s.maxDurable = max(s.maxDurable, p)
	return nil
}
