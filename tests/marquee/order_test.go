package marquee

import (
	"testing"

	"github.com/jackc/pglogrepl"
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
	audit := map[int64][]auditRow{
		1: {{Xid: 1, Rel: "notes", PK: "n1", Op: "insert", New: map[string]any{"id": "n1", "owner": "a"}}},
		2: {{Xid: 2, Rel: "notes", PK: "n1", Op: "update", New: map[string]any{"id": "n1", "owner": "b"}}},
	}
	events := map[pglogrepl.LSN][]eventRow{
		lo: {{CommitLSN: lo, Rel: "notes", PK: "n1", Op: "insert"}},
		hi: {{CommitLSN: hi, Rel: "notes", PK: "n1", Op: "update"}},
	}
	txns[0].EventCount, txns[1].EventCount = 1, 1
	effects = []effectRow{
		{Scope: "owner:b", CommitLSN: hi, Table: "notes", PK: "n1", Op: "upsert"},
		{Scope: "owner:a", CommitLSN: hi, Table: "notes", PK: "n1", Op: "delete"},
		{Scope: "owner:a", CommitLSN: lo, Table: "notes", PK: "n1", Op: "upsert"},
	}
	sortStream(txns, effects)
	v := judge(audit, txns, events, effects, map[string]map[string]map[string]any{"notes": {}, "tasks": {}, "project_members": {}})
	if v.loss != 0 || v.dups != 0 || len(v.problems) != 0 {
		t.Fatalf("loss=%d dups=%d %v", v.loss, v.dups, v.problems)
	}
}
