package collate_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/synchro/synchro/runner/collate"
	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/pgoutput"
	pt "github.com/synchro/synchro/runner/decode/pgtest"
)

var ts = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// recorder logs sink calls as short strings.
type recorder struct {
	log     []string
	failOn  string
	lastEvt collate.Event
}

func (r *recorder) call(s string) error {
	r.log = append(r.log, s)
	if r.failOn != "" && strings.HasPrefix(s, r.failOn) {
		return errors.New("sink failure")
	}
	return nil
}

func (r *recorder) Begin(_ context.Context, h collate.TxnHeader) error {
	return r.call(fmt.Sprintf("B %s xid=%d", h.CommitLSN, h.Xid))
}

func (r *recorder) Event(_ context.Context, e collate.Event) error {
	r.lastEvt = e
	switch e.Kind {
	case collate.KindRow:
		return r.call(fmt.Sprintf("row#%d %s %s", e.Ordinal, e.Row.Op, e.Row.Relation.Name))
	case collate.KindTruncate:
		return r.call(fmt.Sprintf("truncate#%d", e.Ordinal))
	case collate.KindMessage:
		tag := e.Message.Prefix
		if e.Fence != nil {
			tag = "fence:" + string(e.Fence.Op)
		}
		if e.Activation != nil {
			tag = fmt.Sprintf("activation:%d", e.Activation.Generation)
		}
		return r.call(fmt.Sprintf("msg@%d %s", e.Ordinal, tag))
	}
	return r.call("?")
}

func (r *recorder) Commit(_ context.Context, t collate.TxnTrailer) error {
	return r.call(fmt.Sprintf("C %s end=%s rows=%d msgs=%d", t.CommitLSN, t.EndLSN, t.RowEvents, t.Messages))
}

const fid = "6f1e2c3d-4b5a-4789-9abc-def012345678"

func fence(op string) []byte {
	oldKey, newKey := `"1"`, `"1"`
	switch op {
	case "insert":
		oldKey = "null"
	case "delete":
		newKey = "null"
	}
	return []byte(`{"v":2,"kind":"synced","relation_id":3,"schema":"public","table":"tasks","op":"` + op +
		`","old_key":` + oldKey + `,"new_key":` + newKey + `,"version":"v1","fence_id":"` + fid +
		`","ordinal":5,"table_id":"tasks","pk":1,"mac":"0123456789abcdef0123456789abcdef"}`)
}

var row1 = pt.Tuple(pt.Text("1"), pt.Text("x"))

func rel() []byte {
	return pt.Relation(16384, "public", "tasks", 'd',
		pt.Col{Name: "id", TypeOID: 20, TypeMod: -1, Key: true}, pt.Col{Name: "title", TypeOID: 25, TypeMod: -1})
}

// run decodes payloads with a fresh pgoutput decoder and feeds a fresh Collator.
func run(t *testing.T, sink collate.Sink, payloads ...[]byte) (*collate.Collator, error) {
	t.Helper()
	d := pgoutput.NewDecoder()
	c := collate.New(sink)
	for i, p := range payloads {
		walStart := pglogrepl.LSN(0x1000 + i)
		msgs, err := d.Decode(walStart, p)
		if err != nil {
			t.Fatalf("payload %d: decode: %v", i, err)
		}
		if err := c.Feed(context.Background(), walStart, msgs); err != nil {
			return c, err
		}
	}
	return c, nil
}

func TestOrdinalsInterleaved(t *testing.T) {
	r := &recorder{}
	c, err := run(t, r,
		pt.Begin(0x500, ts, 9),
		rel(),
		pt.Message(true, 1, decode.PrefixFence, fence("insert")), // before any row: position 0
		pt.Insert(16384, row1),
		pt.Message(true, 2, "app.other", []byte("opaque")),
		pt.Message(false, 3, "app.nontx", nil), // ignored
		pt.Update(16384, 0, nil, row1),
		pt.Message(true, 4, decode.PrefixRegistry, []byte(`{"v":2,"generation":2,"previous":1,"mac":"0123456789abcdef0123456789abcdef"}`)),
		pt.Message(true, 5, decode.PrefixFence, fence("update")),
		pt.Truncate(0, 16384),
		pt.Delete(16384, 'K', pt.Tuple(pt.Text("1"), pt.Null())),
		pt.Message(true, 6, decode.PrefixFence, fence("delete")),
		pt.Commit(0x500, 0x530, ts),
		pt.Begin(0x600, ts, 10),
		pt.Insert(16384, row1),
		pt.Commit(0x600, 0x640, ts),
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"B 0/500 xid=9",
		"msg@0 fence:insert",
		"row#0 insert tasks",
		"msg@1 app.other",
		"row#1 update tasks",
		"msg@2 activation:2",
		"msg@2 fence:update",
		"truncate#2",
		"row#3 delete tasks",
		"msg@4 fence:delete",
		"C 0/500 end=0/530 rows=4 msgs=5",
		"B 0/600 xid=10",
		"row#0 insert tasks",
		"C 0/600 end=0/640 rows=1 msgs=0",
	}
	if strings.Join(r.log, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(r.log, "\n"), strings.Join(want, "\n"))
	}
	if c.InTransaction() {
		t.Fatal("in transaction after commit")
	}
	if cl, end, ok := c.LastCommit(); !ok || cl != 0x600 || end != 0x640 {
		t.Fatalf("LastCommit = %v %v %v", cl, end, ok)
	}
}

func TestInTransactionAndLastCommit(t *testing.T) {
	r := &recorder{}
	c := collate.New(r)
	ctx := context.Background()
	if _, _, ok := c.LastCommit(); ok || c.InTransaction() {
		t.Fatal("fresh collator state")
	}
	if err := c.Feed(ctx, 1, []decode.Message{&decode.Begin{FinalLSN: 0x10}}); err != nil {
		t.Fatal(err)
	}
	if !c.InTransaction() {
		t.Fatal("not in transaction after begin")
	}
	if _, _, ok := c.LastCommit(); ok {
		t.Fatal("LastCommit before any commit")
	}
	if err := c.Feed(ctx, 2, []decode.Message{&decode.Commit{CommitLSN: 0x10, EndLSN: 0x18}}); err != nil {
		t.Fatal(err)
	}
	if c.InTransaction() {
		t.Fatal("in transaction after commit")
	}
	// Several messages in one Feed call.
	err := c.Feed(ctx, 3, []decode.Message{
		&decode.Begin{FinalLSN: 0x20}, &decode.Commit{CommitLSN: 0x20, EndLSN: 0x28},
	})
	if _, end, _ := c.LastCommit(); err != nil || end != 0x28 {
		t.Fatal(err, end)
	}
}

func TestFramingErrors(t *testing.T) {
	relMsg := &decode.Relation{OID: 1, Name: "t"}
	row := &decode.Row{Op: decode.OpInsert, Relation: relMsg, New: &decode.Tuple{Kind: decode.TupleNew}}
	begin := func(l pglogrepl.LSN) *decode.Begin { return &decode.Begin{FinalLSN: l} }
	commit := func(l, e pglogrepl.LSN) *decode.Commit { return &decode.Commit{CommitLSN: l, EndLSN: e} }
	cases := []struct {
		name  string
		msgs  []decode.Message
		class decode.Class
	}{
		{"nested begin", []decode.Message{begin(0x10), begin(0x20)}, decode.ClassTransactionFraming},
		{"commit without begin", []decode.Message{commit(0x10, 0x18)}, decode.ClassTransactionFraming},
		{"commit lsn mismatch", []decode.Message{begin(0x10), commit(0x11, 0x18)}, decode.ClassTransactionFraming},
		{"end lsn not after commit", []decode.Message{begin(0x10), commit(0x10, 0x10)}, decode.ClassTransactionFraming},
		{"equal commit lsn", []decode.Message{begin(0x10), commit(0x10, 0x18), begin(0x10)}, decode.ClassCommitOrder},
		{"decreasing commit lsn", []decode.Message{begin(0x20), commit(0x20, 0x28), begin(0x10)}, decode.ClassCommitOrder},
		{"row outside transaction", []decode.Message{row}, decode.ClassTransactionFraming},
		{"row after commit", []decode.Message{begin(0x10), commit(0x10, 0x18), row}, decode.ClassTransactionFraming},
		{"truncate outside transaction", []decode.Message{&decode.Truncate{Relations: []*decode.Relation{relMsg}}}, decode.ClassTransactionFraming},
		{"transactional message outside transaction", []decode.Message{&decode.LogicalMessage{Transactional: true, Prefix: "app"}}, decode.ClassTransactionFraming},
		{"nil message", []decode.Message{nil}, decode.ClassTransactionFraming},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := collate.New(&recorder{})
			var err error
			for i, m := range tc.msgs {
				if err = c.Feed(context.Background(), pglogrepl.LSN(0x100+i), []decode.Message{m}); err != nil {
					break
				}
			}
			var e *decode.Error
			if !errors.As(err, &e) || e.Class != tc.class {
				t.Fatalf("err = %v, want class %s", err, tc.class)
			}
			if e.LSN == 0 {
				t.Fatal("error without position")
			}
			if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "generation\"") {
				t.Fatalf("error leaks: %v", err)
			}
			// Stopped: any further feed fails, even a valid one.
			err2 := c.Feed(context.Background(), 0x999, []decode.Message{&decode.Begin{FinalLSN: 0xFFFF}})
			if cl, _ := decode.ClassOf(err2); cl != decode.ClassStopped {
				t.Fatalf("after error: %v", err2)
			}
			if !errors.Is(c.Err(), err) {
				t.Fatal("Err() differs")
			}
		})
	}
}

// ignoring is a recorder that also counts dropped synchro messages.
type ignoring struct {
	recorder
	ignored map[collate.IgnoreReason]int
}

func (r *ignoring) Ignored(reason collate.IgnoreReason) { r.ignored[reason]++ }

// Messages anyone can emit never stop the collator: they are dropped and counted.
func TestStrangerSynchroMessagesIgnored(t *testing.T) {
	fenceMsg := func(content string) *decode.LogicalMessage {
		return &decode.LogicalMessage{Transactional: true, Prefix: decode.PrefixFence, Content: []byte(content)}
	}
	r := &ignoring{ignored: map[collate.IgnoreReason]int{}}
	c := collate.New(r)
	msgs := []decode.Message{
		&decode.LogicalMessage{Prefix: decode.PrefixFence, Content: fence("insert")}, // outside any transaction
		&decode.Begin{FinalLSN: 0x10},
		&decode.LogicalMessage{Prefix: "synchro.x"},
		&decode.LogicalMessage{Transactional: true, Prefix: "synchro.other", Content: []byte("{}")},
		fenceMsg(`{"v":2}`),
		fenceMsg(strings.Replace(string(fence("insert")), `"v":2`, `"v":1`, 1)),
		fenceMsg(strings.Replace(string(fence("insert")), `,"mac":"0123456789abcdef0123456789abcdef"`, ``, 1)),
		&decode.LogicalMessage{Transactional: true, Prefix: decode.PrefixRegistry, Content: []byte(`{"v":2,"generation":"SECRET"}`)},
		fenceMsg(string(fence("insert"))), // well-formed: passed on (materialization checks its MAC)
		&decode.Commit{CommitLSN: 0x10, EndLSN: 0x18},
	}
	for i, m := range msgs {
		if err := c.Feed(context.Background(), pglogrepl.LSN(0x100+i), []decode.Message{m}); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	want := map[collate.IgnoreReason]int{
		collate.IgnoreNonTransactional: 2, collate.IgnoreUnknownPrefix: 1, collate.IgnoreMalformed: 4,
	}
	if fmt.Sprint(r.ignored) != fmt.Sprint(want) {
		t.Fatalf("ignored %v, want %v", r.ignored, want)
	}
	if got := strings.Join(r.log, "|"); got != "B 0/10 xid=0|msg@0 fence:insert|C 0/10 end=0/18 rows=0 msgs=1" {
		t.Fatal(got)
	}
}

func TestNonSynchroNonTransactionalIgnored(t *testing.T) {
	r := &recorder{}
	c := collate.New(r)
	err := c.Feed(context.Background(), 1, []decode.Message{
		&decode.LogicalMessage{Prefix: "app.x"},
		&decode.Relation{OID: 1}, &decode.TypeInfo{OID: 2}, &decode.Origin{Name: "o"},
	})
	if err != nil || len(r.log) != 0 {
		t.Fatal(err, r.log)
	}
}

func TestSinkErrorStops(t *testing.T) {
	for _, failOn := range []string{"B ", "row#", "msg@", "C "} {
		t.Run(failOn, func(t *testing.T) {
			r := &recorder{failOn: failOn}
			c, err := run(t, r, pt.Begin(0x500, ts, 9), rel(),
				pt.Insert(16384, row1), pt.Message(true, 1, "app", nil), pt.Commit(0x500, 0x510, ts))
			if err == nil || err.Error() != "sink failure" {
				t.Fatalf("err = %v", err)
			}
			if _, _, ok := c.LastCommit(); ok {
				t.Fatal("commit recorded despite sink failure")
			}
			if c.Feed(context.Background(), 1, nil) == nil {
				t.Fatal("collator not stopped")
			}
		})
	}
}

func TestContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := collate.New(&recorder{}).Feed(ctx, 1, []decode.Message{&decode.Begin{FinalLSN: 1}}); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// countingSink keeps O(1) state and samples the heap mid-transaction.
type countingSink struct {
	t         *testing.T
	begins    int
	events    uint64
	commits   int
	baseline  uint64
	maxGrowth uint64
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func (s *countingSink) Begin(context.Context, collate.TxnHeader) error { s.begins++; return nil }
func (s *countingSink) Event(_ context.Context, e collate.Event) error {
	if e.Ordinal != s.events {
		s.t.Fatalf("ordinal %d, want %d", e.Ordinal, s.events)
	}
	s.events++
	if s.events%250_000 == 0 {
		if h := heapAlloc(); h > s.baseline && h-s.baseline > s.maxGrowth {
			s.maxGrowth = h - s.baseline
		}
	}
	return nil
}
func (s *countingSink) Commit(_ context.Context, tr collate.TxnTrailer) error {
	s.commits++
	if tr.RowEvents != s.events {
		s.t.Fatalf("trailer rows %d, want %d", tr.RowEvents, s.events)
	}
	return nil
}

func TestMillionRowTransactionStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const n = 1_000_000
	ctx := context.Background()
	d := pgoutput.NewDecoder()
	sink := &countingSink{t: t}
	c := collate.New(sink)
	feed := func(lsn pglogrepl.LSN, p []byte) {
		msgs, err := d.Decode(lsn, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Feed(ctx, lsn, msgs); err != nil {
			t.Fatal(err)
		}
	}
	feed(1, rel())
	ins := pt.Insert(16384, pt.Tuple(pt.Text("123456789"), pt.Text(strings.Repeat("x", 100))))
	sink.baseline = heapAlloc()
	feed(2, pt.Begin(0x10_0000_0000, ts, 1))
	for i := range n {
		feed(pglogrepl.LSN(3+i), ins)
	}
	if !c.InTransaction() {
		t.Fatal("transaction closed early")
	}
	feed(pglogrepl.LSN(3+n), pt.Commit(0x10_0000_0000, 0x10_0000_0100, ts))
	if sink.begins != 1 || sink.commits != 1 || sink.events != n {
		t.Fatalf("begins=%d commits=%d events=%d", sink.begins, sink.commits, sink.events)
	}
	// 1M rows of ~150 bytes decoded would be well over 200 MB if retained.
	const limit = 32 << 20
	if sink.maxGrowth >= limit {
		t.Fatalf("heap grew by %d bytes mid-transaction; want < %d", sink.maxGrowth, limit)
	}
	t.Logf("max heap growth mid-transaction: %d bytes", sink.maxGrowth)
}
