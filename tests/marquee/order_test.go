package marquee

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

// The oracle orders the stream by LSN value. A full-size run writes more than 256 MB
// of WAL: its LSNs pass 0/10000000, where text order ("0/10000000" < "0/FFFFFF8")
// differs from stream order. The run that first crossed it applied the model in text
// order (loss=3063 dups=1814, positions "not increasing"). Red when the collected
// stream is left in text order.
func TestOracleStreamOrderIsNumeric(t *testing.T) {
	lo, hi := lsn("0/FFFFFF8"), lsn("0/10000010")
	txns := []txnRow{{Xid: 2, CommitLSN: hi}, {Xid: 1, CommitLSN: lo}}
	effects := []effectRow{{Scope: "user:u1", CommitLSN: hi}, {Scope: "user:u1", CommitLSN: lo}}
	sortStream(txns, effects)
	if txns[0].CommitLSN != lo || effects[0].CommitLSN != lo {
		t.Fatalf("stream order: txns %v, effects %v", txns, effects)
	}
	// The judge reads them in that order: no position problem, the model applies
	// transaction 1 first.
	a1 := map[string]any{"id": "n1", "owner": "a"}
	a2 := map[string]any{"id": "n1", "owner": "b"}
	audit := map[int64][]auditRow{
		1: {{Xid: 1, Rel: "notes", PK: "n1", Op: "insert", Version: "v1", New: a1}},
		2: {{Xid: 2, Rel: "notes", PK: "n1", Op: "update", Version: "v2", New: a2}},
	}
	events := map[pglogrepl.LSN][]eventRow{
		lo: {{CommitLSN: lo, Rel: "notes", PK: "n1", Op: "insert", Version: "v1"}},
		hi: {{CommitLSN: hi, Rel: "notes", PK: "n1", Op: "update", Version: "v2"}},
	}
	txns[0].EventCount, txns[1].EventCount = 1, 1
	txns[0].EndLSN, txns[1].EndLSN = lo+0x30, hi+0x30
	effects = []effectRow{
		{Scope: "owner:b", CommitLSN: hi, Table: "notes", PK: "n1", Op: "upsert", Version: "v2", Image: canonImage(a2)},
		{Scope: "owner:a", CommitLSN: hi, Table: "notes", PK: "n1", Op: "delete"},
		{Scope: "owner:a", CommitLSN: lo, Table: "notes", PK: "n1", Op: "upsert", Version: "v1", Image: canonImage(a1)},
	}
	sortStream(txns, effects)
	order := []commitRow{{Xid: 1, CommitLSN: lo, EndLSN: lo + 0x30}, {Xid: 2, CommitLSN: hi, EndLSN: hi + 0x30}}
	v := judge(audit, txns, events, effects, order, snapshot{rows: map[string]map[string]map[string]any{"notes": {}, "tasks": {}, "project_members": {}}})
	if v.loss != 0 || v.dups != 0 || len(v.problems) != 0 {
		t.Fatalf("loss=%d dups=%d %v", v.loss, v.dups, v.problems)
	}
}

// scenario is a small stream as a correct engine materializes it, for the oracle's
// own tests: three source transactions over the marquee's schema, one of which moves
// a membership (two tasks leave user:u1 in one event).
type scenario struct {
	audit   map[int64][]auditRow
	txns    []txnRow
	events  map[pglogrepl.LSN][]eventRow
	effects []effectRow
	order   []commitRow
	initial snapshot
}

func newScenario() *scenario {
	task := func(id, project int, owner, title string) map[string]any {
		return map[string]any{"id": id, "project_id": project, "owner": owner, "title": title, "v": 0}
	}
	s := &scenario{
		initial: snapshot{
			rows: map[string]map[string]map[string]any{
				"project_members": {"1": {"id": 1, "project_id": 1, "user_id": "u1"}},
				"tasks":           {"1": task(1, 1, "a", "t"), "2": task(2, 1, "b", "t")},
				"notes":           {},
			},
			versions: map[string]string{"project_members/1": "p0", "tasks/1": "t10", "tasks/2": "t20"},
		},
		audit: map[int64][]auditRow{
			10: {
				{Rel: "notes", PK: "n1", Op: "insert", Version: "n1a", New: map[string]any{"id": "n1", "owner": "a", "body": "b"}},
				{Rel: "tasks", PK: "1", Op: "update", Version: "t11", New: task(1, 1, "b", "t")},
			},
			11: {{Rel: "project_members", PK: "1", Op: "update", Version: "p1", New: map[string]any{"id": 1, "project_id": 2, "user_id": "u1"}}},
			12: {
				{Rel: "tasks", PK: "2", Op: "update", Version: "t21", New: task(2, 1, "b", "t2")},
				{Rel: "tasks", PK: "1", Op: "update", Version: "t12", New: task(1, 1, "b", "t1")},
			},
		},
		events: map[pglogrepl.LSN][]eventRow{},
	}
	m := newModel(s.initial)
	for i, xid := range []int64{10, 11, 12} {
		clsn := pglogrepl.LSN(0x1000 * (i + 1))
		rs := s.audit[xid]
		for j := range rs {
			rs[j].Xid = xid
			s.events[clsn] = append(s.events[clsn], eventRow{CommitLSN: clsn, Ordinal: j, Rel: rs[j].Rel, PK: rs[j].PK, Op: rs[j].Op, Version: rs[j].Version})
		}
		s.txns = append(s.txns, txnRow{Xid: xid, CommitLSN: clsn, EndLSN: clsn + 0x30, EventCount: len(rs)})
		s.order = append(s.order, commitRow{Xid: xid, CommitLSN: clsn, EndLSN: clsn + 0x30})
		s.effects = append(s.effects, m.apply(clsn, rs)...)
	}
	sortStream(s.txns, s.effects)
	return s
}

func (s *scenario) judge() verdict {
	return judge(s.audit, s.txns, s.events, s.effects, s.order, s.initial)
}

// effect is the scenario's effect in scope at commit LSN clsn on row pk.
func (s *scenario) effect(t *testing.T, scope string, clsn pglogrepl.LSN, pk string) *effectRow {
	t.Helper()
	for i, e := range s.effects {
		if e.Scope == scope && e.CommitLSN == clsn && e.PK == pk {
			return &s.effects[i]
		}
	}
	t.Fatalf("no effect %s %s %s in %v", scope, clsn, pk, s.effects)
	return nil
}

// Each check of the oracle goes red on the stream fault it is there for.
func TestOracleChecksGoRed(t *testing.T) {
	s := newScenario()
	require.Len(t, s.effects, 8, "%v", s.effects)
	v := s.judge()
	require.Empty(t, v.problems)
	require.Zero(t, v.loss+v.dups)

	for _, c := range []struct {
		name   string
		mutate func(t *testing.T, s *scenario)
		want   string
	}{
		{"an upsert delivers another image", func(t *testing.T, s *scenario) {
			e := s.effect(t, "owner:b", 0x3000, "2")
			e.Image = strings.Replace(e.Image, `"t2"`, `"t"`, 1)
		}, "has image"},
		{"an upsert delivers the row's previous version", func(t *testing.T, s *scenario) {
			s.effect(t, "owner:b", 0x3000, "1").Version = "t11"
		}, "unchanged across a change of the row"},
		{"an upsert delivers a version no fence gave", func(t *testing.T, s *scenario) {
			s.effect(t, "owner:b", 0x1000, "1").Version = "forged"
		}, "has version \"forged\""},
		{"an event carries another version", func(t *testing.T, s *scenario) {
			s.events[0x3000][1].Version = "t11"
		}, "the source's fence gave"},
		{"an event's effects in another order", func(t *testing.T, s *scenario) {
			// The two deletes of the membership move, ordinals swapped (dense still).
			a, b := s.effect(t, "user:u1", 0x2000, "1"), s.effect(t, "user:u1", 0x2000, "2")
			a.Effect, b.Effect = b.Effect, a.Effect
		}, "positions not increasing in commit order"},
		{"an event's effects in another order, as the model sees it", func(t *testing.T, s *scenario) {
			a, b := s.effect(t, "user:u1", 0x2000, "1"), s.effect(t, "user:u1", 0x2000, "2")
			a.Effect, b.Effect = b.Effect, a.Effect
		}, "has ordinal 1, expected 0"},
		{"an ordinal skipped", func(t *testing.T, s *scenario) {
			s.effect(t, "user:u1", 0x2000, "2").Effect = 2
		}, "ordinal 2 after 0"},
		{"the stream's commit order differs from the source's", func(t *testing.T, s *scenario) {
			// The slot saw 11 commit before 10: the stream put them the other way.
			s.order[0], s.order[1] = s.order[1], s.order[0]
		}, "commit order: xid 10 committed after xid 11"},
		{"a transaction's end is not its commit record's", func(t *testing.T, s *scenario) {
			s.txns[2].EndLSN++
		}, "its commit record at"},
		{"a commit the slot did not see", func(t *testing.T, s *scenario) {
			s.order = s.order[:2]
		}, "missing from the commit order"},
		{"the fence reuses a version", func(t *testing.T, s *scenario) {
			s.audit[12][1].Version = "t11"
		}, "a second time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScenario()
			c.mutate(t, s)
			v := s.judge()
			require.NotEmpty(t, v.problems)
			require.Condition(t, func() bool {
				for _, p := range v.problems {
					if strings.Contains(p, c.want) {
						return true
					}
				}
				return false
			}, "want a problem with %q, got %q", c.want, v.problems)
		})
	}
}
