package marquee

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The oracle compares what committed (marquee_audit, written by triggers in the source
// transactions themselves) with what the stream materialized (synchro.txn, event,
// effect), and an independent model of the scope rules with the effects. The order the
// source transactions committed in comes from a logical slot of the oracle's own
// (commitLog), not from the stream's ledger: the model runs in that order, and the
// stream's positions must follow it.

// auditRow is one committed row change.
type auditRow struct {
	Xid     int64
	Rel     string
	PK      string
	Op      string
	Version string         // the version the change's fence gave it
	New     map[string]any // nil for a delete
}

type txnRow struct {
	Xid        int64
	CommitLSN  pglogrepl.LSN
	EndLSN     pglogrepl.LSN
	EventCount int
}

type eventRow struct {
	CommitLSN pglogrepl.LSN
	Ordinal   int
	Rel, PK   string
	Op        string
	Version   string
}

// effectRow is one pull effect: its position (scope, commit LSN, event and effect
// ordinals), row and operation, and what an upsert delivers: the row's version and
// image (canonical JSON; both "" for a delete, which delivers neither).
type effectRow struct {
	Scope     string
	CommitLSN pglogrepl.LSN
	Event     int
	Effect    int
	Table, PK string
	Op        string
	Version   string
	Image     string
}

// key is the effect's identity, which must be present exactly once: scope, source
// event, row and operation. Its effect ordinal, version and image are compared where
// the keys match, so a wrong one is reported as such, not as a loss and a duplicate.
func (e effectRow) key() string {
	return fmt.Sprintf("%s|%s|%d|%s|%s|%s", e.Scope, e.CommitLSN, e.Event, e.Table, e.PK, e.Op)
}

// String is the effect with its ordinal, for the reports.
func (e effectRow) String() string {
	return fmt.Sprintf("%s|%s|%d.%d|%s|%s|%s", e.Scope, e.CommitLSN, e.Event, e.Effect, e.Table, e.PK, e.Op)
}

// canonicalLess is the contract's order of the effects of one event in one scope
// (ADR 001, effect_ordinal): table_id bytewise, then the typed key (numeric for int
// keys), then the operation. Only notes has a string key, and its keys ("n1") never
// parse as numbers.
func canonicalLess(a, b effectRow) bool {
	if a.Table != b.Table {
		return a.Table < b.Table
	}
	ai, aerr := strconv.ParseInt(a.PK, 10, 64)
	bi, berr := strconv.ParseInt(b.PK, 10, 64)
	if aerr == nil && berr == nil && ai != bi {
		return ai < bi
	}
	if a.PK != b.PK {
		return a.PK < b.PK
	}
	return a.Op < b.Op
}

// commitRow is one commit as the oracle's own slot decoded it: the start and end of
// its commit record.
type commitRow struct {
	Xid       int64 // 32 bits, as the audit records it
	CommitLSN pglogrepl.LSN
	EndLSN    pglogrepl.LSN
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

// canonImage renders an image with sorted keys and numbers as jsonb wrote them, so
// images read from different jsonb columns compare as strings; "" for none.
func canonImage(m map[string]any) string {
	if m == nil {
		return ""
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
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
	rows, err := conn.Query(ctx, `SELECT xid, rel, pk, op, coalesce(version, ''), new::text FROM marquee_audit ORDER BY seq`)
	if err != nil {
		return
	}
	for rows.Next() {
		var a auditRow
		var img *string
		if err = rows.Scan(&a.Xid, &a.Rel, &a.PK, &a.Op, &a.Version, &img); err != nil {
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
	rows, err = conn.Query(ctx, `SELECT t.xid % 4294967296, t.commit_lsn::text, t.end_lsn::text, t.event_count FROM synchro.txn t
		WHERE t.stream_generation = (SELECT stream_generation FROM synchro.progress) ORDER BY t.commit_lsn`)
	if err != nil {
		return
	}
	for rows.Next() {
		var t txnRow
		var c, e string
		if err = rows.Scan(&t.Xid, &c, &e, &t.EventCount); err != nil {
			return
		}
		t.CommitLSN, t.EndLSN = lsn(c), lsn(e)
		txns = append(txns, t)
	}
	if err = rows.Err(); err != nil {
		return
	}
	events = map[pglogrepl.LSN][]eventRow{}
	rows, err = conn.Query(ctx, `SELECT e.commit_lsn::text, e.event_ordinal, r.table_name, e.pk, e.op, e.version
		FROM synchro.event e JOIN synchro.relation r USING (relation_id)
		WHERE e.stream_generation = (SELECT stream_generation FROM synchro.progress) ORDER BY e.commit_lsn, e.event_ordinal`)
	if err != nil {
		return
	}
	for rows.Next() {
		var e eventRow
		var c string
		if err = rows.Scan(&c, &e.Ordinal, &e.Rel, &e.PK, &e.Op, &e.Version); err != nil {
			return
		}
		e.CommitLSN = lsn(c)
		events[e.CommitLSN] = append(events[e.CommitLSN], e)
	}
	if err = rows.Err(); err != nil {
		return
	}
	rows, err = conn.Query(ctx, `SELECT f.scope, f.commit_lsn::text, f.event_ordinal, f.effect_ordinal, f.table_id, f.pk, f.op,
			coalesce(f.version, ''), f.image::text
		FROM synchro.effect f WHERE f.stream_generation = (SELECT stream_generation FROM synchro.progress)
		ORDER BY f.scope COLLATE "C", f.commit_lsn, f.event_ordinal, f.effect_ordinal`)
	if err != nil {
		return
	}
	for rows.Next() {
		var e effectRow
		var c string
		var img *string
		if err = rows.Scan(&e.Scope, &c, &e.Event, &e.Effect, &e.Table, &e.PK, &e.Op, &e.Version, &img); err != nil {
			return
		}
		e.CommitLSN = lsn(c)
		if img != nil {
			var m map[string]any
			if m, err = decodeJSON([]byte(*img)); err != nil {
				return
			}
			e.Image = canonImage(m)
		}
		effects = append(effects, e)
	}
	if err = rows.Err(); err != nil {
		return
	}
	sortStream(txns, effects)
	return
}

// sortStream puts transactions in commit-LSN order and effects in stream-position
// order per scope (scope, commit LSN, event, effect), comparing LSNs as numbers. The
// oracle's checks do not rely on it (they order by the slot's commit order); it keeps
// the reports in a stable order.
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
	versions   map[string]string                    // rel/pk -> version of the row's last change
	membership map[string]map[string]bool           // rel/pk -> scopes
}

func newModel(initial snapshot) *model {
	m := &model{rows: map[string]map[string]map[string]any{}, versions: map[string]string{}, membership: map[string]map[string]bool{}}
	for rel, rs := range initial.rows {
		m.rows[rel] = map[string]map[string]any{}
		for pk, img := range rs {
			m.rows[rel][pk] = img
		}
	}
	for k, ver := range initial.versions {
		m.versions[k] = ver
	}
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

// apply runs one committed source transaction and returns its expected effects, with
// their ordinals, versions and images: an upsert delivers the row as the transaction
// left it (the final projected state) with the version of its last change, which is
// an earlier transaction's when only the row's scopes changed.
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
		m.versions[a.Rel+"/"+a.PK] = a.Version
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
				out = append(out, effectRow{Scope: s, CommitLSN: clsn, Event: ord, Table: rel, PK: pk, Op: "upsert",
					Version: m.versions[k], Image: canonImage(m.rows[rel][pk])})
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
	// Effect ordinals: 0, 1, ... within each (scope, event), in canonical order.
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		if a.Event != b.Event {
			return a.Event < b.Event
		}
		return canonicalLess(a, b)
	})
	for i := range out {
		if i > 0 && out[i-1].Scope == out[i].Scope && out[i-1].Event == out[i].Event {
			out[i].Effect = out[i-1].Effect + 1
		}
	}
	return out
}

// judge runs every check of the oracle. order is the commit order the oracle's own
// slot decoded (commitLog).
func judge(audit map[int64][]auditRow, txns []txnRow, events map[pglogrepl.LSN][]eventRow, effects []effectRow,
	order []commitRow, initial snapshot) verdict {
	var v verdict
	v.sourceTxns = len(audit)
	for _, rs := range audit {
		v.sourceEvents += len(rs)
	}
	v.effects = len(effects)

	// Commit order: each transaction's rank in the slot's order, and its commit record
	// there.
	rank := map[int64]int{}
	decoded := map[int64]commitRow{}
	for _, c := range order {
		if _, seen := rank[c.Xid]; !seen {
			rank[c.Xid] = len(rank)
			decoded[c.Xid] = c
		}
	}
	// The source transactions in commit order; one the slot did not decode (the
	// oracle's own failure) goes last.
	var source, undecoded []int64
	for xid := range audit {
		if _, ok := rank[xid]; ok {
			source = append(source, xid)
		} else {
			undecoded = append(undecoded, xid)
		}
	}
	sort.Slice(source, func(i, j int) bool { return rank[source[i]] < rank[source[j]] })
	sort.Slice(undecoded, func(i, j int) bool { return undecoded[i] < undecoded[j] })
	for _, xid := range undecoded {
		v.fail("source transaction xid %d (audited) is missing from the commit order the oracle's slot decoded", xid)
	}
	source = append(source, undecoded...)

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
	// The stream's transactions follow the commit order: in the order their xids
	// committed, commit LSNs strictly increase, and each is at the commit record the
	// slot decoded for its xid.
	var ranked []txnRow
	for _, t := range txns {
		if _, ok := rank[t.Xid]; ok {
			ranked = append(ranked, t)
		}
	}
	sort.SliceStable(ranked, func(i, j int) bool { return rank[ranked[i].Xid] < rank[ranked[j].Xid] })
	for i, t := range ranked {
		if d := decoded[t.Xid]; t.CommitLSN != d.CommitLSN || t.EndLSN != d.EndLSN {
			v.fail("txn %s (xid %d) is at %s-%s in the stream, its commit record at %s-%s in the oracle's slot",
				t.CommitLSN, t.Xid, t.CommitLSN, t.EndLSN, d.CommitLSN, d.EndLSN)
		}
		if p := ranked[max(i-1, 0)]; i > 0 && t.CommitLSN <= p.CommitLSN {
			v.fail("commit order: xid %d committed after xid %d, but its commit LSN %s is not above %s", t.Xid, p.Xid, t.CommitLSN, p.CommitLSN)
		}
	}
	// Events: each (transaction, event) identity exactly once, in source order, with
	// the version the source's fence gave the change.
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
			case got[i].Version != want[i].Version:
				v.fail("txn %s (xid %d): event %d (%s %s %s) has version %q, the source's fence gave %q", t.CommitLSN, t.Xid, i,
					got[i].Rel, got[i].PK, got[i].Op, got[i].Version, want[i].Version)
			}
		}
	}
	// Effects: the model's expected scope effects, each present exactly once, at the
	// expected position, with the expected version and image. The model runs through
	// every source transaction in commit order; an unmaterialized one (counted as lost
	// above) changes its state but expects nothing.
	m := newModel(initial)
	want := map[string]effectRow{}
	wantN := map[string]int{}
	for _, xid := range source {
		ts := byXid[xid]
		var clsn pglogrepl.LSN
		if len(ts) > 0 {
			clsn = ts[0].CommitLSN
		}
		for _, e := range m.apply(clsn, audit[xid]) {
			if len(ts) > 0 {
				want[e.key()] = e
				wantN[e.key()]++
			}
		}
	}
	got := map[string]effectRow{}
	gotN := map[string]int{}
	for _, e := range effects {
		got[e.key()] = e
		gotN[e.key()]++
	}
	for k, n := range wantN {
		if gotN[k] < n {
			v.loss += n - gotN[k]
			v.fail("expected effect %s missing", k)
		}
	}
	for k, n := range gotN {
		if n > wantN[k] {
			v.dups += n - wantN[k]
			v.fail("effect %s present %d times, expected %d", k, n, wantN[k])
		}
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
		case g.Effect != w.Effect:
			v.fail("effect %s has ordinal %d, expected %d (the canonical order of its event's effects in its scope)", k, g.Effect, w.Effect)
		case g.Version != w.Version:
			v.fail("effect %s has version %q, expected %q (the fence of the row's last change)", k, g.Version, w.Version)
		case g.Image != w.Image:
			v.fail("effect %s has image %s, expected the audited %s", k, g.Image, w.Image)
		}
	}

	// The effects in source order: per scope, by the commit order of their
	// transactions, then event, then the canonical order of an event's effects. None
	// of it is the effects' own positions.
	xidAt := map[pglogrepl.LSN]int64{}
	txnAt := map[pglogrepl.LSN]txnRow{}
	for _, t := range txns {
		xidAt[t.CommitLSN] = t.Xid
		txnAt[t.CommitLSN] = t
	}
	var inOrder []effectRow
	for _, e := range effects {
		t, ok := txnAt[e.CommitLSN]
		if !ok || e.Event < 0 || e.Event >= t.EventCount {
			v.fail("effect %s outside any materialized event", e)
			continue
		}
		if _, ok := rank[t.Xid]; !ok {
			v.fail("effect %s: its transaction xid %d is not in the commit order the oracle's slot decoded", e, t.Xid)
			continue
		}
		inOrder = append(inOrder, e)
	}
	sort.SliceStable(inOrder, func(i, j int) bool {
		a, b := inOrder[i], inOrder[j]
		ra, rb := rank[xidAt[a.CommitLSN]], rank[xidAt[b.CommitLSN]]
		switch {
		case a.Scope != b.Scope:
			return a.Scope < b.Scope
		case ra != rb:
			return ra < rb
		case a.Event != b.Event:
			return a.Event < b.Event
		}
		return canonicalLess(a, b)
	})
	// Positions per scope strictly increase in that order, and effect ordinals are
	// 0, 1, ... within each (transaction, event).
	for i, e := range inOrder {
		if i == 0 || inOrder[i-1].Scope != e.Scope {
			if e.Effect != 0 {
				v.fail("effect %s: the first effect of its event in its scope has ordinal %d", e, e.Effect)
			}
			continue
		}
		p := inOrder[i-1]
		sameEvent := p.CommitLSN == e.CommitLSN && p.Event == e.Event
		increasing := p.CommitLSN < e.CommitLSN || p.CommitLSN == e.CommitLSN && p.Event < e.Event || sameEvent && p.Effect < e.Effect
		if !increasing {
			v.fail("scope %s: positions not increasing in commit order: %s after %s", e.Scope, e, p)
		}
		switch {
		case sameEvent && e.Effect != p.Effect+1:
			v.fail("effect %s: ordinal %d after %d", e, e.Effect, p.Effect)
		case !sameEvent && e.Effect != 0:
			v.fail("effect %s: the first effect of its event in its scope has ordinal %d", e, e.Effect)
		}
	}

	// Versions. At the source every change of a row has a version of its own. In the
	// stream a row's upserts carry one version per transaction: a new one when the row
	// changed since its previous upsert, the same one when only its scopes changed.
	written := map[string][]int{} // rel/pk -> ranks of the transactions that changed it
	versions := map[string]map[string]bool{}
	for _, xid := range source {
		for _, a := range audit[xid] {
			k := a.Rel + "/" + a.PK
			if a.Version == "" {
				v.fail("audit: xid %d %s %s %s has no version", xid, a.Rel, a.PK, a.Op)
			} else if versions[k][a.Version] {
				v.fail("audit: row %s got version %s a second time (xid %d)", k, a.Version, xid)
			}
			if versions[k] == nil {
				versions[k] = map[string]bool{}
			}
			versions[k][a.Version] = true
			if r, ok := rank[xid]; ok && (len(written[k]) == 0 || written[k][len(written[k])-1] != r) {
				written[k] = append(written[k], r)
			}
		}
	}
	type upsert struct {
		rank    int
		version string
	}
	var rowOrder []effectRow
	for _, e := range inOrder {
		if e.Op == "upsert" {
			rowOrder = append(rowOrder, e)
		}
	}
	sort.SliceStable(rowOrder, func(i, j int) bool {
		return rank[xidAt[rowOrder[i].CommitLSN]] < rank[xidAt[rowOrder[j].CommitLSN]]
	})
	last := map[string]upsert{}
	for _, e := range rowOrder {
		k := e.Table + "/" + e.PK
		r := rank[xidAt[e.CommitLSN]]
		p, seen := last[k]
		last[k] = upsert{r, e.Version}
		switch {
		case !seen:
		case p.rank == r:
			if p.version != e.Version {
				v.fail("row %s: versions %s and %s in one transaction (%s)", k, p.version, e.Version, e)
			}
		default:
			// Changed since the previous upsert: a write in a transaction after it, up
			// to this one.
			w := written[k]
			i := sort.SearchInts(w, p.rank+1)
			changed := i < len(w) && w[i] <= r
			if changed && e.Version == p.version {
				v.fail("row %s: version %s unchanged across a change of the row (%s)", k, e.Version, e)
			}
			if !changed && e.Version != p.version {
				v.fail("row %s: version %s became %s without a change of the row (%s)", k, p.version, e.Version, e)
			}
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
	pollReconnecting(ctx, s.url, 50*time.Millisecond, 20*time.Millisecond, s.sample)
}

// pollReconnecting runs step on a connection to url every interval until ctx ends,
// reconnecting through PostgreSQL's crashes: a failed step drops the connection, a
// failed connection attempt is tried again after retry.
func pollReconnecting(ctx context.Context, url string, retry, every time.Duration, step func(context.Context, *pgx.Conn) error) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := pgx.Connect(cctx, url)
			cancel()
			if err != nil {
				sleep(ctx, retry)
				continue
			}
			conn = c
		}
		if err := step(ctx, conn); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
		}
		sleep(ctx, every)
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

// commitLog is the oracle's own record of the order transactions committed in: a
// logical slot of its own, decoded by PostgreSQL (pgoutput, through the SQL interface)
// with a publication of marquee_audit alone, so it returns exactly the transactions
// with an audited change, in commit order, each commit with its xid and commit record.
// None of it comes from the stream's ledger or the runner; the order is the one
// PostgreSQL's logical decoding replays transactions in, whatever the plugin.
// (test_decoding would do too, but it renders every change of every table as text, the
// pack's own materialization writes included, and gives only the end of a commit
// record.)
//
// The slot is created before any audited write and read every 30 seconds during the
// run; each read advances the slot past the commits it returned, so it holds back at
// most about a minute of WAL and catalog rows (the server, and the stream's slot, run
// as without it; a run writes less than 2 MB a second). Each read decodes again from
// the slot's restart point, so fewer reads cost less: 57 reads every 2 s spent 13 s, 23
// every 5 s 4.5 s, on a CI-size run. Peek, then advance: a read that breaks off (PostgreSQL crashed) has consumed
// nothing. A crash can also move the slot back to its last checkpointed position (the
// SQL interface's progress is written out only then): the commits it returns again are
// the same, in the same order, and are skipped.
type commitLog struct {
	url, slot string

	mu    sync.Mutex
	seen  map[int64]bool
	order []commitRow
	reads int
	busy  time.Duration // spent in reads
	err   error         // the last failed read's error
}

// newCommitLog creates the publication and the slot. The slot's creation waits for the
// transactions running at that moment, like every logical slot creation.
func newCommitLog(ctx context.Context, url, slot string) (*commitLog, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE PUBLICATION marquee_order FOR TABLE marquee_audit`); err != nil {
		return nil, fmt.Errorf("the oracle's publication: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		return nil, fmt.Errorf("the oracle's slot: %w", err)
	}
	return &commitLog{url: url, slot: slot, seen: map[int64]bool{}}, nil
}

// run reads until ctx ends, reconnecting through PostgreSQL's crashes.
func (l *commitLog) run(ctx context.Context) {
	pollReconnecting(ctx, l.url, 100*time.Millisecond, 30*time.Second, l.read)
}

// read records the commits decoded since the last read and advances the slot past
// them. Only the commit messages ('C', 67) cross the wire; the xid column of a commit
// message's row is its transaction's.
func (l *commitLog) read(ctx context.Context, conn *pgx.Conn) (err error) {
	began := time.Now()
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.reads++
		l.busy += time.Since(began)
		if err != nil {
			l.err = err
		}
	}()
	qctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rows, err := conn.Query(qctx, `SELECT xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', 'marquee_order') WHERE get_byte(data, 0) = 67`, l.slot)
	if err != nil {
		return err
	}
	var last pglogrepl.LSN
	for rows.Next() {
		var xid int64
		var data []byte
		if err := rows.Scan(&xid, &data); err != nil {
			return err
		}
		msg, err := pglogrepl.Parse(data)
		if err != nil {
			return err
		}
		cm, ok := msg.(*pglogrepl.CommitMessage)
		if !ok {
			return fmt.Errorf("the oracle's slot: %T", msg)
		}
		end := cm.TransactionEndLSN
		last = max(last, end)
		l.mu.Lock()
		if !l.seen[xid] {
			l.seen[xid] = true
			l.order = append(l.order, commitRow{Xid: xid, CommitLSN: cm.CommitLSN, EndLSN: end})
		}
		l.mu.Unlock()
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if last == 0 {
		return nil
	}
	_, err = conn.Exec(qctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, l.slot, last.String())
	return err
}

// commits is the commit order decoded so far.
func (l *commitLog) commits() []commitRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]commitRow(nil), l.order...)
}
