package wal2json_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/wal2json"
)

// docsTable is the shape of public.docs in testdata/capture.jsonl, as the
// catalog gives it (OID 16411 on the server the payloads were captured from):
//
//	CREATE TABLE public.docs (id int8 PRIMARY KEY, owner text, flag bool, body json,
//	  meta jsonb, blob bytea, n int4, big text, at timestamptz);
//	ALTER TABLE public.docs ALTER big SET STORAGE EXTERNAL;
func docsTable() wal2json.Table {
	return wal2json.Table{
		Relation: decode.Relation{OID: 16411, Namespace: "public", Name: "docs", ReplicaIdentity: 'd',
			Columns: []decode.Column{
				{Name: "id", TypeOID: 20, TypeMod: -1, Key: true}, {Name: "owner", TypeOID: 25, TypeMod: -1},
				{Name: "flag", TypeOID: 16, TypeMod: -1}, {Name: "body", TypeOID: 114, TypeMod: -1},
				{Name: "meta", TypeOID: 3802, TypeMod: -1}, {Name: "blob", TypeOID: 17, TypeMod: -1},
				{Name: "n", TypeOID: 23, TypeMod: -1}, {Name: "big", TypeOID: 25, TypeMod: -1},
				{Name: "at", TypeOID: 1184, TypeMod: -1},
			}},
		TypLens:         []int32{8, -1, 1, -1, -1, -1, 4, -1, 8},
		FirstGeneration: 1,
	}
}

func newSession(t testing.TB) decode.Session {
	t.Helper()
	s, err := wal2json.NewSession([]wal2json.Table{docsTable()}, decode.SessionSpec{RegistryGeneration: 1, Authentic: trustAll}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// capture is testdata/capture.jsonl: real wal2json 2.5 format-2 payloads
// (Debian postgresql-15-wal2json) with the runner's options, one per line: a
// transaction of two inserts and a fence message, an update that leaves the
// TOASTed column out, a delete, a transaction that changes only a table outside
// add-tables (B and C only), a non-transactional message, a truncate.
func capture(t testing.TB) [][]byte {
	t.Helper()
	f, err := os.Open("testdata/capture.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, bytes.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func decodeAll(t testing.TB, s decode.Session, payloads [][]byte) []decode.Message {
	t.Helper()
	var out []decode.Message
	for i, p := range payloads {
		msgs, err := s.Decode(pglogrepl.LSN(i+1), p)
		if err != nil {
			t.Fatalf("payload %d: %v", i, err)
		}
		out = append(out, msgs...)
	}
	return out
}

func text(s string) decode.Value { return decode.Value{Kind: decode.ValueText, Data: []byte(s)} }

var null = decode.Value{Kind: decode.ValueNull}

func TestDecodeCapture(t *testing.T) {
	s := newSession(t)
	msgs := decodeAll(t, s, capture(t))
	var kinds []string
	for _, m := range msgs {
		kinds = append(kinds, strings.TrimPrefix(reflect.TypeOf(m).String(), "*decode."))
	}
	// The transaction of xid 754 (a table outside add-tables) is dropped whole,
	// as pgoutput never sends it; the non-transactional message passes alone.
	want := []string{"Begin", "Row", "Row", "LogicalMessage", "Commit", "Begin", "Row", "Commit",
		"Begin", "Row", "Commit", "LogicalMessage", "Begin", "Truncate", "Commit"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("messages %v, want %v", kinds, want)
	}

	b := msgs[0].(*decode.Begin)
	if b.FinalLSN.String() != "0/15A5480" || b.Xid != 751 ||
		!b.CommitTime.Equal(time.Date(2026, 12, 1, 16, 37, 20, 538755000, time.UTC)) {
		t.Fatalf("begin %+v", b)
	}
	c := msgs[4].(*decode.Commit)
	if c.CommitLSN != b.FinalLSN || c.EndLSN.String() != "0/15A54B0" || !c.CommitTime.Equal(b.CommitTime) {
		t.Fatalf("commit %+v", c)
	}

	// Values as pgoutput's text: strings unescaped, t and f, \x restored on bytea,
	// numbers verbatim, json and jsonb as their text.
	ins := msgs[1].(*decode.Row)
	if ins.Op != decode.OpInsert || ins.Old != nil || ins.Relation.OID != 16411 {
		t.Fatalf("insert %+v", ins)
	}
	want1 := []decode.Value{text("1"), text("a\"b\\c\n"), text("t"), text(`{"k" : [1, 2.50]}`), text(`{"z": null}`),
		text(`\x00ff10`), text("-7"), text(strings.Repeat("é", 3000)), text("2020-01-02 03:04:05.123456+00")}
	if !reflect.DeepEqual(ins.New.Values, want1) {
		t.Fatalf("insert values %v", ins.New.Values)
	}
	ins2 := msgs[2].(*decode.Row)
	want2 := []decode.Value{text("2"), null, text("f"), null, null, null, null, null, null}
	if !reflect.DeepEqual(ins2.New.Values, want2) {
		t.Fatalf("second insert values %v", ins2.New.Values)
	}
	m := msgs[3].(*decode.LogicalMessage)
	if !m.Transactional || m.Prefix != decode.PrefixFence || string(m.Content) != `{"v" : 2}` || m.LSN.String() != "0/15A5480" {
		t.Fatalf("message %+v", m)
	}

	// The update leaves the TOASTed column out: unchanged TOAST, no old key (the
	// key did not change), as pgoutput sends it.
	up := msgs[6].(*decode.Row)
	if up.Op != decode.OpUpdate || up.Old != nil || up.New.Values[7].Kind != decode.ValueUnchangedToast ||
		!reflect.DeepEqual(up.New.Values[1], text("b")) {
		t.Fatalf("update %+v %v", up, up.New)
	}
	if up.Relation != ins.Relation {
		t.Fatal("an update in the known shape must not make a new relation")
	}
	del := msgs[9].(*decode.Row)
	if del.Op != decode.OpDelete || del.Old.Kind != decode.TupleKey || !reflect.DeepEqual(del.Old.Values[0], text("2")) ||
		del.Old.Values[1].Kind != decode.ValueNull {
		t.Fatalf("delete %+v", del)
	}
	nt := msgs[11].(*decode.LogicalMessage)
	if nt.Transactional || string(nt.Content) != "x" {
		t.Fatalf("non-transactional message %+v", nt)
	}
	tr := msgs[13].(*decode.Truncate)
	if len(tr.Relations) != 1 || tr.Relations[0].OID != 16411 {
		t.Fatalf("truncate %+v", tr)
	}
}

// TestDecodeCaptureTamper flips every byte of every captured payload: each
// mutation must be refused with a bounded, value-free error, or decode to
// something else than the original. A flip that decodes to the same messages
// means the decoder ignores bytes it should check.
func TestDecodeCaptureTamper(t *testing.T) {
	payloads := capture(t)
	for i, p := range payloads {
		if len(p) > 4096 {
			continue // the TOASTed insert: one 6000-byte string; the other payloads cover its fields
		}
		prefix, suffix := txnAround(payloads, i)
		if len(prefix)+len(suffix) == 1 && bytes.Contains(p, []byte(`"xid":754`)) {
			continue // the transaction outside add-tables: dropped whole, its bytes change nothing
		}
		orig := outcome(t, prefix, p, suffix)
		// A row or truncate's own lsn reaches no message (pgoutput's rows carry
		// none); it is checked for form and order only, so a flip that keeps it in
		// order is not a difference. Its bytes are skipped.
		lsnFrom, lsnTo := -1, -1
		if !bytes.HasPrefix(p, []byte(`{"action":"B"`)) && !bytes.HasPrefix(p, []byte(`{"action":"C"`)) &&
			!bytes.HasPrefix(p, []byte(`{"action":"M"`)) {
			lsnFrom = bytes.Index(p, []byte(`"lsn":"`)) + len(`"lsn":"`)
			lsnTo = lsnFrom + bytes.IndexByte(p[lsnFrom:], '"')
		}
		for j := range p {
			if j >= lsnFrom && j < lsnTo {
				continue
			}
			for _, mask := range []byte{0x01, 0x20} {
				q := bytes.Clone(p)
				q[j] ^= mask
				if got := outcome(t, prefix, q, suffix); got == orig {
					t.Fatalf("payload %d byte %d ^%#x (%q→%q) decodes as the original", i, j, mask, p[j], q[j])
				}
			}
		}
	}
}

// txnAround returns the payloads of payload i's transaction before and after
// it (none for a payload outside a transaction), so that what it contributes
// is decoded and visible.
func txnAround(payloads [][]byte, i int) (prefix, suffix [][]byte) {
	isB := func(p []byte) bool { return bytes.HasPrefix(p, []byte(`{"action":"B"`)) }
	isC := func(p []byte) bool { return bytes.HasPrefix(p, []byte(`{"action":"C"`)) }
	start := -1
	for k := i; k >= 0; k-- {
		if isC(payloads[k]) && k != i {
			break
		}
		if isB(payloads[k]) {
			start = k
			break
		}
	}
	if start < 0 {
		return nil, nil
	}
	prefix = payloads[start:i]
	for k := i; k < len(payloads); k++ {
		if isC(payloads[k]) {
			return prefix, payloads[i+1 : k+1]
		}
	}
	return prefix, nil
}

// prefixFor returns the payloads a payload needs before it: the begin of its
// transaction when it is inside one.
func prefixFor(payloads [][]byte, i int) [][]byte {
	prefix, _ := txnAround(payloads, i)
	return prefix
}

// outcome decodes prefix, p and suffix on a fresh session and renders the
// result (messages, or the first error's class), checking that an error is
// bounded and never quotes the payload.
func outcome(t *testing.T, prefix [][]byte, p []byte, suffix [][]byte) string {
	t.Helper()
	s := newSession(t)
	var all []decode.Message
	for k, q := range append(append(append([][]byte(nil), prefix...), p), suffix...) {
		msgs, err := s.Decode(pglogrepl.LSN(k+1), q)
		if err != nil {
			checkErr(t, err, q)
			c, _ := decode.ClassOf(err)
			return fmt.Sprintf("error %s at %d", c, k)
		}
		all = append(all, msgs...)
	}
	return render(all)
}

func render(msgs []decode.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		switch m := m.(type) {
		case *decode.Row:
			b.WriteString(m.Op.String())
			for _, tp := range []*decode.Tuple{m.Old, m.New} {
				if tp == nil {
					b.WriteString(" -")
					continue
				}
				b.WriteString(" " + string(rune(tp.Kind)))
				for _, v := range tp.Values {
					b.WriteString("|" + v.Kind.String() + ":" + string(v.Data))
				}
			}
			for _, c := range m.Relation.Columns {
				fmt.Fprintf(&b, " %s/%d/%t", c.Name, c.TypeOID, c.Key)
			}
			b.WriteString(" ident=" + string(m.Relation.ReplicaIdentity))
		default:
			b.WriteString(strings.ReplaceAll(reflect.TypeOf(m).String(), "*decode.", ""))
			b.WriteString(" ")
			b.WriteString(strings.ReplaceAll(strings.ReplaceAll(fmtValue(m), "\n", ""), " ", ""))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func fmtValue(m decode.Message) string {
	switch m := m.(type) {
	case *decode.Begin:
		return fmt.Sprintf("%s %s %d", m.FinalLSN, m.CommitTime.Format(time.RFC3339Nano), m.Xid)
	case *decode.Commit:
		return fmt.Sprintf("%s %s %s", m.CommitLSN, m.EndLSN, m.CommitTime.Format(time.RFC3339Nano))
	case *decode.LogicalMessage:
		return m.LSN.String() + m.Prefix + string(m.Content) + map[bool]string{true: "t", false: "f"}[m.Transactional]
	case *decode.Truncate:
		return m.Relations[0].Namespace + "." + m.Relations[0].Name
	case *decode.Relation:
		return m.Name
	}
	return ""
}

func checkErr(t *testing.T, err error, payload []byte) {
	t.Helper()
	var e *decode.Error
	c, ok := decode.ClassOf(err)
	if !ok || !slices.Contains(decode.Classes(), c) {
		t.Fatalf("error %v (%T) is not a *decode.Error of a known class", err, err)
	}
	_ = e
	msg := err.Error()
	if len(msg) > 240 {
		t.Fatalf("unbounded error text (%d bytes)", len(msg))
	}
	// Value-free: no value of the payload appears in the error text.
	for _, v := range []string{"a\"b", "00ff10", "2020-01-02", "synchro.fence", "-7"} {
		if bytes.Contains(payload, []byte(v)) && strings.Contains(msg, v) {
			t.Fatalf("error text quotes a payload value: %s", msg)
		}
	}
}

func TestDecodeShapeChanges(t *testing.T) {
	begin := []byte(`{"action":"B","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200","nextlsn":"0/210"}`)
	cols := `{"name":"id","typeoid":20,"value":3},{"name":"owner","typeoid":25,"value":"o"},{"name":"flag","typeoid":16,"value":null},` +
		`{"name":"body","typeoid":114,"value":null},{"name":"meta","typeoid":3802,"value":null},{"name":"blob","typeoid":17,"value":null},` +
		`{"name":"n","typeoid":23,"value":5}`
	for _, tc := range []struct {
		name, doc string
		check     func(t *testing.T, rel *decode.Relation)
	}{
		{"insert without a column: dropped", `{"action":"I","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/100","schema":"public","table":"docs","columns":[` +
			cols + `,{"name":"at","typeoid":1184,"value":null}],"pk":[{"name":"id","typeoid":20}]}`,
			func(t *testing.T, rel *decode.Relation) {
				if len(rel.Columns) != 8 || slices.ContainsFunc(rel.Columns, func(c decode.Column) bool { return c.Name == "big" }) {
					t.Fatalf("columns %v", rel.Columns)
				}
			}},
		{"update without a fixed-width column: dropped", `{"action":"U","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/100","schema":"public","table":"docs","columns":[` +
			cols + `],"identity":[{"name":"id","typeoid":20,"value":3}],"pk":[{"name":"id","typeoid":20}]}`,
			func(t *testing.T, rel *decode.Relation) {
				if slices.ContainsFunc(rel.Columns, func(c decode.Column) bool { return c.Name == "at" }) ||
					!slices.ContainsFunc(rel.Columns, func(c decode.Column) bool { return c.Name == "big" }) {
					t.Fatalf("columns %v", rel.Columns)
				}
			}},
		{"retyped column", `{"action":"I","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/100","schema":"public","table":"docs","columns":[` +
			strings.Replace(cols, `"name":"n","typeoid":23`, `"name":"n","typeoid":20`, 1) +
			`,{"name":"big","typeoid":25,"value":null},{"name":"at","typeoid":1184,"value":null}],"pk":[{"name":"id","typeoid":20}]}`,
			func(t *testing.T, rel *decode.Relation) {
				if rel.Columns[6].TypeOID != 20 || rel.Columns[6].TypeMod != -1 {
					t.Fatalf("columns %v", rel.Columns)
				}
			}},
		{"added column", `{"action":"I","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/100","schema":"public","table":"docs","columns":[` +
			cols + `,{"name":"big","typeoid":25,"value":null},{"name":"at","typeoid":1184,"value":null},{"name":"extra","typeoid":25,"value":"e"}],"pk":[{"name":"id","typeoid":20}]}`,
			func(t *testing.T, rel *decode.Relation) {
				if len(rel.Columns) != 10 || rel.Columns[9].Name != "extra" {
					t.Fatalf("columns %v", rel.Columns)
				}
			}},
		{"replica identity full", `{"action":"D","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/100","schema":"public","table":"docs","identity":[` +
			cols + `,{"name":"big","typeoid":25,"value":null},{"name":"at","typeoid":1184,"value":null}],"pk":[{"name":"id","typeoid":20}]}`,
			func(t *testing.T, rel *decode.Relation) {
				if rel.ReplicaIdentity != decode.ReplicaIdentityFull {
					t.Fatalf("identity %c", rel.ReplicaIdentity)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(t)
			if _, err := s.Decode(1, begin); err != nil {
				t.Fatal(err)
			}
			msgs, err := s.Decode(2, []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			// Begin, the new Relation, the Row in the new shape.
			if len(msgs) != 3 {
				t.Fatalf("%d messages", len(msgs))
			}
			rel, ok := msgs[1].(*decode.Relation)
			if !ok || msgs[2].(*decode.Row).Relation != rel {
				t.Fatalf("no new relation before the row: %T", msgs[1])
			}
			tc.check(t, rel)
		})
	}
}

func TestDecodeRefusals(t *testing.T) {
	begin := []byte(`{"action":"B","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200","nextlsn":"0/210"}`)
	for _, tc := range []struct {
		name  string
		doc   string
		class decode.Class
	}{
		{"commit without lsn", `{"action":"C","xid":9,"timestamp":"2026-01-01 00:00:00+00","nextlsn":"0/210"}`, decode.ClassMalformed},
		{"commit without end lsn", `{"action":"C","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200"}`, decode.ClassMalformed},
		{"unknown field", `{"action":"C","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200","nextlsn":"0/210","x":1}`, decode.ClassMalformed},
		{"number for a text column", `{"action":"I","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/100","schema":"public","table":"docs","columns":[{"name":"id","typeoid":20,"value":1},{"name":"owner","typeoid":25,"value":5}]}`, decode.ClassMalformed},
		{"table outside the set", `{"action":"I","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/100","schema":"public","table":"other","columns":[{"name":"id","typeoid":23,"value":1}]}`, decode.ClassUnknownRelation},
		{"unknown action", `{"action":"X"}`, decode.ClassUnsupportedMessage},
		{"begin in a transaction", string(begin), decode.ClassTransactionFraming},
		{"activation of an unknown generation", `{"action":"M","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/150","transactional":true,"prefix":"synchro.registry","content":"{\"v\": 2, \"mac\": \"0123456789abcdef0123456789abcdef\", \"previous\": 1, \"generation\": 2}"}`, decode.ClassTableSetChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(t)
			if _, err := s.Decode(1, begin); err != nil {
				t.Fatal(err)
			}
			_, err := s.Decode(2, []byte(tc.doc))
			if c, ok := decode.ClassOf(err); !ok || c != tc.class {
				t.Fatalf("error %v, want class %s", err, tc.class)
			}
			checkErr(t, err, []byte(tc.doc))
		})
	}
}

// TestFirstChangeRefusalCarriesCommitLSN: a refusal of a transaction's first change
// (its Begin still held back) carries the transaction's commit LSN, so the runner
// quarantines the transaction, which a retry resolves, not the change's own LSN,
// which no retry ever resolves. (The integration test provoked it with a database
// default bytea_output = escape until the runner pinned bytea_output on its sessions.)
func TestFirstChangeRefusalCarriesCommitLSN(t *testing.T) {
	s := newSession(t)
	begin := []byte(`{"action":"B","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200","nextlsn":"0/210"}`)
	if _, err := s.Decode(1, begin); err != nil {
		t.Fatal(err)
	}
	_, err := s.Decode(2, []byte(`{"action":"I","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/100","schema":"public","table":"docs","columns":[{"name":"id","typeoid":20,"value":1},{"name":"owner","typeoid":25,"value":5}]}`))
	var derr *decode.Error
	if !errors.As(err, &derr) {
		t.Fatalf("error %v, want a decode.Error", err)
	}
	if derr.CommitLSN != 0x200 {
		t.Fatalf("commit LSN %s, want 0/200", derr.CommitLSN)
	}
}

// TestActivationRestartsOnce: an activation of a generation the table set
// predates ends the session once; the same activation (by position) is then let
// through, so a forged one cannot end every session.
func TestActivationRestartsOnce(t *testing.T) {
	begin := []byte(`{"action":"B","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200","nextlsn":"0/210"}`)
	act := []byte(`{"action":"M","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/150","transactional":true,"prefix":"synchro.registry","content":"{\"v\": 2, \"mac\": \"0123456789abcdef0123456789abcdef\", \"previous\": 1, \"generation\": 2}"}`)
	s, err := wal2json.NewSession([]wal2json.Table{docsTable()}, decode.SessionSpec{RegistryGeneration: 1, RestartedAt: 0x150,
		Authentic: trustAll}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decode(1, begin); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decode(2, act); err != nil {
		t.Fatalf("the activation that already ended a session ends another: %v", err)
	}
	// Not let through: another activation of a generation the table set predates.
	s, err = wal2json.NewSession([]wal2json.Table{docsTable()}, decode.SessionSpec{RegistryGeneration: 1, Authentic: trustAll}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decode(1, begin); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decode(2, act); !errors.Is(err, &decode.Error{Class: decode.ClassTableSetChanged}) {
		t.Fatalf("an authentic activation the table set predates: %v, want table_set_changed", err)
	}
}

// trustAll takes every activation for the pack's own (the runner checks the MAC).
func trustAll(*decode.Activation) bool { return true }

// TestForgedActivationIgnored: an activation that is not the pack's own
// (SessionSpec.Authentic says no) neither ends the session nor moves the
// generation the session decodes with; nil Authentic trusts none.
func TestForgedActivationIgnored(t *testing.T) {
	tb := docsTable()
	tb.FirstGeneration = 2
	payloads := capture(t)
	begin, before, ins := payloads[0], payloads[1], payloads[2]
	future := []byte(`{"action":"M","xid":751,"timestamp":"2026-12-01 16:37:20.538755+00","lsn":"0/15A5300","transactional":true,"prefix":"synchro.registry","content":"{\"v\": 2, \"mac\": \"0123456789abcdef0123456789abcdef\", \"previous\": 2, \"generation\": 9}"}`)
	next := []byte(`{"action":"M","xid":751,"timestamp":"2026-12-01 16:37:20.538755+00","lsn":"0/15A5310","transactional":true,"prefix":"synchro.registry","content":"{\"v\": 2, \"mac\": \"0123456789abcdef0123456789abcdef\", \"previous\": 1, \"generation\": 2}"}`)
	for _, auth := range []func(*decode.Activation) bool{nil, func(*decode.Activation) bool { return false }} {
		s, err := wal2json.NewSession([]wal2json.Table{tb}, decode.SessionSpec{RegistryGeneration: 1, Authentic: auth}, 2)
		if err != nil {
			t.Fatal(err)
		}
		msgs := decodeAll(t, s, [][]byte{begin, before, future, next, ins})
		for _, m := range msgs {
			if _, ok := m.(*decode.Relation); ok {
				t.Fatalf("a forged activation made a relation of a later generation decoded: %d messages", len(msgs))
			}
		}
		if len(msgs) != 3 {
			t.Fatalf("%d messages, want begin and the two forged messages", len(msgs))
		}
	}
}

// TestRelationBeforeItsGeneration: changes of a relation registered by a later
// generation are not decoded before that generation's activation (pgoutput's
// publication does not hold it yet), and are from the activation on.
func TestRelationBeforeItsGeneration(t *testing.T) {
	tb := docsTable()
	tb.FirstGeneration = 2
	s, err := wal2json.NewSession([]wal2json.Table{tb}, decode.SessionSpec{RegistryGeneration: 1, Authentic: trustAll}, 2)
	if err != nil {
		t.Fatal(err)
	}
	payloads := capture(t)
	begin, before, ins := payloads[0], payloads[1], payloads[2]
	act := []byte(`{"action":"M","xid":751,"timestamp":"2026-12-01 16:37:20.538755+00","lsn":"0/15A5300","transactional":true,"prefix":"synchro.registry","content":"{\"v\": 2, \"mac\": \"0123456789abcdef0123456789abcdef\", \"previous\": 1, \"generation\": 2}"}`)
	msgs := decodeAll(t, s, [][]byte{begin, before})
	if len(msgs) != 0 {
		t.Fatalf("a change before its relation's generation was decoded: %d messages", len(msgs))
	}
	msgs = decodeAll(t, s, [][]byte{act, ins})
	if len(msgs) != 3 {
		t.Fatalf("%d messages after the activation, want begin, message, row", len(msgs))
	}
}

func TestStartOptions(t *testing.T) {
	tb := docsTable()
	tb.Relation.Namespace, tb.Relation.Name = "s p", "we.ird,t*\\x"
	s, err := wal2json.NewSession([]wal2json.Table{tb}, decode.SessionSpec{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	opts := s.StartOptions()
	if !slices.Contains(opts, `"format-version" '2'`) || !slices.Contains(opts, `"include-lsn" 'true'`) ||
		opts[len(opts)-1] != `"add-tables" 's\ p.we\.ird\,t\*\\x'` {
		t.Fatalf("options %q", opts)
	}
	// A table named * is escaped like any other: wal2json 2.5 tests for its wildcard
	// before it removes escapes (the integration test writes an unregistered table
	// beside it, TestDecoderEdgeWal2jsonTableNamedStar).
	tb.Relation.Namespace, tb.Relation.Name = "*", "*"
	star, err := wal2json.NewSession([]wal2json.Table{tb}, decode.SessionSpec{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if o := star.StartOptions(); o[len(o)-1] != `"add-tables" '\*.\*'` {
		t.Fatalf("options %q", o)
	}
	if s.Boundary([]byte(`{"action":"B","xid":1}`)) != decode.BoundaryBegin ||
		s.Boundary([]byte(`{"action":"C","xid":1}`)) != decode.BoundaryCommit ||
		s.Boundary([]byte(`{"action":"I"}`)) != decode.BoundaryNone {
		t.Fatal("boundary")
	}
}

func TestCapabilities(t *testing.T) {
	if err := decode.CheckCapabilities(wal2json.Plugin{}, 150000); err != nil {
		t.Fatal(err)
	}
	// Format 1: one document per transaction, no per-change LSN: refused.
	err := decode.CheckCapabilities(wal2json.Plugin{FormatVersion: 1}, 150000)
	if c, _ := decode.ClassOf(err); c != decode.ClassCapabilityUnsupported {
		t.Fatalf("format 1: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	payloads := capture(f)
	for i, p := range payloads {
		f.Add(bytes.Join(append(prefixFor(payloads, i), p), []byte{'\n'}))
	}
	// A message whose content is not UTF-8, as wal2json writes it (TestDecodeMessageNotUTF8).
	f.Add([]byte("{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2026-01-01 00:00:00+00\",\"lsn\":\"0/200\",\"nextlsn\":\"0/210\"}\n" +
		"{\"action\":\"M\",\"xid\":9,\"timestamp\":\"2026-01-01 00:00:00+00\",\"lsn\":\"0/1F0\",\"transactional\":true," +
		"\"prefix\":\"synchro.fence\",\"content\":\"\xffA\xfe\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSession(t)
		for _, p := range bytes.Split(data, []byte{'\n'}) {
			if _, err := s.Decode(1, p); err != nil {
				checkErr(t, err, p)
				return
			}
		}
	})
}

// A logical message's content is the one place wal2json writes bytes that are not
// UTF-8 (it copies them verbatim, up to the first NUL: captured from wal2json 2.5 for
// pg_logical_emit_message(true, 'synchro.fence', '\xff41fe00424344'::bytea)). pgoutput
// hands such content to the collator, which drops what does not parse: the decoder
// delivers the message (invalid bytes replaced), never refuses the document, or anyone
// who may emit a message could block the stream. Anywhere else, bytes that are not
// UTF-8 are malformed.
func TestDecodeMessageNotUTF8(t *testing.T) {
	begin := []byte(`{"action":"B","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200","nextlsn":"0/210"}`)
	msg := []byte("{\"action\":\"M\",\"xid\":9,\"timestamp\":\"2026-01-01 00:00:00+00\",\"lsn\":\"0/1F0\"," +
		"\"transactional\":true,\"prefix\":\"synchro.fence\",\"content\":\"\xffA\xfe\"}")
	commit := []byte(`{"action":"C","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200","nextlsn":"0/210"}`)
	msgs := decodeAll(t, newSession(t), [][]byte{begin, msg, commit})
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want begin, message, commit", len(msgs))
	}
	m, ok := msgs[1].(*decode.LogicalMessage)
	if !ok || m.Prefix != decode.PrefixFence || !m.Transactional || string(m.Content) != "\uFFFDA\uFFFD" {
		t.Fatalf("message %#v", msgs[1])
	}
	// Outside a message's content: malformed.
	row := []byte("{\"action\":\"I\",\"xid\":9,\"timestamp\":\"2026-01-01 00:00:00+00\",\"lsn\":\"0/1F0\",\"schema\":\"public\"," +
		"\"table\":\"docs\",\"columns\":[{\"name\":\"id\",\"typeoid\":20,\"value\":1},{\"name\":\"owner\",\"typeoid\":25,\"value\":\"\xff\"}]}")
	s := newSession(t)
	if _, err := s.Decode(1, begin); err != nil {
		t.Fatal(err)
	}
	_, err := s.Decode(2, row)
	if c, _ := decode.ClassOf(err); c != decode.ClassMalformed {
		t.Fatalf("a row value that is not UTF-8: %v", err)
	}
}

// The decoder asks wal2json for every logical message, as pgoutput's messages 'true'
// gets them: a message filter would drop transactions pgoutput materializes.
func TestStartOptionsNoMessageFilter(t *testing.T) {
	s := newSession(t)
	for _, o := range s.StartOptions() {
		if strings.Contains(o, "msg-prefixes") {
			t.Fatalf("option %s filters logical messages", o)
		}
	}
}

// TestChangeLSNOrder: the changes of one WAL record (a COPY's multi-insert, one
// TRUNCATE of several tables) share its lsn and pass; a change before the previous
// one, a zero lsn or one at the commit record is refused (transaction framing).
func TestChangeLSNOrder(t *testing.T) {
	begin := []byte(`{"action":"B","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"0/200","nextlsn":"0/210"}`)
	ins := func(lsn string, id int) []byte {
		return []byte(fmt.Sprintf(`{"action":"I","xid":9,"timestamp":"2026-01-01 00:00:00+00","lsn":"%s","schema":"public","table":"docs","columns":[{"name":"id","typeoid":20,"value":%d},{"name":"owner","typeoid":25,"value":"a"}]}`, lsn, id))
	}
	s := newSession(t)
	if _, err := s.Decode(1, begin); err != nil {
		t.Fatal(err)
	}
	for i, lsn := range []string{"0/100", "0/100", "0/100", "0/180", "0/180"} {
		if _, err := s.Decode(pglogrepl.LSN(2+i), ins(lsn, i)); err != nil {
			t.Fatalf("change %d at %s: %v", i, lsn, err)
		}
	}
	for _, tc := range []struct{ name, lsn string }{{"before the previous change", "0/17F"}, {"zero", "0/0"}, {"at the commit", "0/200"}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(t)
			if _, err := s.Decode(1, begin); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Decode(2, ins("0/180", 1)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Decode(3, ins(tc.lsn, 2)); !errors.Is(err, &decode.Error{Class: decode.ClassTransactionFraming}) {
				t.Fatalf("change at %s: %v, want transaction_framing", tc.lsn, err)
			}
		})
	}
}
