package pgoutput_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/pgoutput"
	pt "github.com/synchro/synchro/runner/decode/pgtest"
)

const secret = "SECRET-ROW-VALUE"

var ts = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func tasksRel(oid uint32) []byte {
	return pt.Relation(oid, "public", "tasks", 'd',
		pt.Col{Name: "id", TypeOID: 20, TypeMod: -1, Key: true},
		pt.Col{Name: "title", TypeOID: 25, TypeMod: -1},
		pt.Col{Name: "body", TypeOID: 25, TypeMod: -1},
	)
}

func mustDecode(t *testing.T, d *pgoutput.Decoder, data []byte) decode.Message {
	t.Helper()
	msgs, err := d.Decode(0x100, data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(msgs) != 1 {
		t.Fatalf("got %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

func wantClass(t *testing.T, err error, class decode.Class) *decode.Error {
	t.Helper()
	var e *decode.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not *decode.Error", err, err)
	}
	if e.Class != class {
		t.Fatalf("class = %q (%v), want %q", e.Class, err, class)
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("error leaks a value: %q", err.Error())
	}
	return e
}

func vals(t *testing.T, tup *decode.Tuple) []string {
	t.Helper()
	var out []string
	for _, v := range tup.Values {
		switch v.Kind {
		case decode.ValueNull:
			out = append(out, "<null>")
		case decode.ValueUnchangedToast:
			out = append(out, "<toast>")
		case decode.ValueText:
			out = append(out, string(v.Data))
		case decode.ValueBinary:
			out = append(out, "b:"+string(v.Data))
		default:
			t.Fatalf("bad value kind %d", v.Kind)
		}
	}
	return out
}

func eq(a, b []string) bool { return strings.Join(a, "|") == strings.Join(b, "|") }

func TestDecodeFraming(t *testing.T) {
	d := pgoutput.NewDecoder()
	b := mustDecode(t, d, pt.Begin(0x1000, ts, 77)).(*decode.Begin)
	if b.FinalLSN != 0x1000 || b.Xid != 77 || !b.CommitTime.Equal(ts) {
		t.Fatalf("begin = %+v", b)
	}
	c := mustDecode(t, d, pt.Commit(0x1000, 0x1010, ts)).(*decode.Commit)
	if c.CommitLSN != 0x1000 || c.EndLSN != 0x1010 || !c.CommitTime.Equal(ts) {
		t.Fatalf("commit = %+v", c)
	}
	o := mustDecode(t, d, pt.Origin(0x55, "up")).(*decode.Origin)
	if o.CommitLSN != 0x55 || o.Name != "up" {
		t.Fatalf("origin = %+v", o)
	}
	y := mustDecode(t, d, pt.Type(16500, "public", "mood")).(*decode.TypeInfo)
	if y.OID != 16500 || y.Namespace != "public" || y.Name != "mood" {
		t.Fatalf("type = %+v", y)
	}
}

func TestDecodeRows(t *testing.T) {
	d := pgoutput.NewDecoder()
	rel := mustDecode(t, d, tasksRel(16384)).(*decode.Relation)
	if rel.OID != 16384 || rel.Namespace != "public" || rel.Name != "tasks" || rel.ReplicaIdentity != decode.ReplicaIdentityDefault {
		t.Fatalf("relation = %+v", rel)
	}
	if len(rel.Columns) != 3 || !rel.Columns[0].Key || rel.Columns[1].Key || rel.Columns[0].TypeOID != 20 || rel.Columns[0].TypeMod != -1 || rel.Columns[2].Name != "body" {
		t.Fatalf("columns = %+v", rel.Columns)
	}

	type want struct {
		op      decode.Op
		oldKind decode.TupleKind // 0: no old tuple
		old     []string
		new     []string // nil: no new tuple
	}
	cases := []struct {
		name string
		data []byte
		want want
	}{
		{"insert", pt.Insert(16384, pt.Tuple(pt.Text("1"), pt.Text("a"), pt.Null())),
			want{op: decode.OpInsert, new: []string{"1", "a", "<null>"}}},
		{"insert empty text", pt.Insert(16384, pt.Tuple(pt.Text("1"), pt.Text(""), pt.Bin([]byte{1}))),
			want{op: decode.OpInsert, new: []string{"1", "", "b:\x01"}}},
		{"update without old tuple, unchanged toast", pt.Update(16384, 0, nil, pt.Tuple(pt.Text("1"), pt.Text("b"), pt.Toast())),
			want{op: decode.OpUpdate, new: []string{"1", "b", "<toast>"}}},
		{"update with key-only old tuple", pt.Update(16384, 'K', pt.Tuple(pt.Text("1"), pt.Null(), pt.Null()), pt.Tuple(pt.Text("2"), pt.Text("b"), pt.Toast())),
			want{op: decode.OpUpdate, oldKind: decode.TupleKey, old: []string{"1", "<null>", "<null>"}, new: []string{"2", "b", "<toast>"}}},
		{"update with full old tuple", pt.Update(16384, 'O', pt.Tuple(pt.Text("1"), pt.Text("a"), pt.Toast()), pt.Tuple(pt.Text("1"), pt.Text("b"), pt.Toast())),
			want{op: decode.OpUpdate, oldKind: decode.TupleOld, old: []string{"1", "a", "<toast>"}, new: []string{"1", "b", "<toast>"}}},
		{"delete key-only", pt.Delete(16384, 'K', pt.Tuple(pt.Text("1"), pt.Null(), pt.Null())),
			want{op: decode.OpDelete, oldKind: decode.TupleKey, old: []string{"1", "<null>", "<null>"}}},
		{"delete full", pt.Delete(16384, 'O', pt.Tuple(pt.Text("1"), pt.Text("a"), pt.Null())),
			want{op: decode.OpDelete, oldKind: decode.TupleOld, old: []string{"1", "a", "<null>"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			row := mustDecode(t, d, tc.data).(*decode.Row)
			if row.Op != tc.want.op || row.Relation != rel {
				t.Fatalf("op=%v relation=%p want %v %p", row.Op, row.Relation, tc.want.op, rel)
			}
			if tc.want.oldKind == 0 {
				if row.Old != nil {
					t.Fatalf("old = %v, want nil", row.Old)
				}
			} else {
				if row.Old == nil || row.Old.Kind != tc.want.oldKind || !eq(vals(t, row.Old), tc.want.old) {
					t.Fatalf("old = %v %q", row.Old, vals(t, row.Old))
				}
			}
			if tc.want.new == nil {
				if row.New != nil {
					t.Fatalf("new = %v, want nil", row.New)
				}
			} else if row.New == nil || row.New.Kind != decode.TupleNew || !eq(vals(t, row.New), tc.want.new) {
				t.Fatalf("new = %v", row.New)
			}
		})
	}
}

func TestValuesDoNotAliasPayload(t *testing.T) {
	d := pgoutput.NewDecoder()
	mustDecode(t, d, tasksRel(1))
	p := pt.Insert(1, pt.Tuple(pt.Text("1"), pt.Text("abc"), pt.Null()))
	row := mustDecode(t, d, p).(*decode.Row)
	m := pt.Message(true, 9, "x", []byte("hello"))
	lm := mustDecode(t, d, m).(*decode.LogicalMessage)
	for i := range p {
		p[i] = 0
	}
	for i := range m {
		m[i] = 0
	}
	if string(row.New.Values[1].Data) != "abc" || string(lm.Content) != "hello" {
		t.Fatal("decoded data aliases the payload buffer")
	}
}

func TestRelationReplaced(t *testing.T) {
	d := pgoutput.NewDecoder()
	r1 := mustDecode(t, d, tasksRel(7)).(*decode.Relation)
	row1 := mustDecode(t, d, pt.Insert(7, pt.Tuple(pt.Text("1"), pt.Null(), pt.Null()))).(*decode.Row)
	r2 := mustDecode(t, d, pt.Relation(7, "public", "tasks", 'd',
		pt.Col{Name: "id", TypeOID: 20, TypeMod: -1, Key: true},
		pt.Col{Name: "title", TypeOID: 25, TypeMod: -1})).(*decode.Relation)
	row2 := mustDecode(t, d, pt.Insert(7, pt.Tuple(pt.Text("2"), pt.Null()))).(*decode.Row)
	if row1.Relation != r1 || row2.Relation != r2 || len(r1.Columns) != 3 || len(r2.Columns) != 2 {
		t.Fatal("relation cache did not replace by OID")
	}
	if got, _ := d.Relation(7); got != r2 {
		t.Fatal("Relation(7) is not the latest")
	}
	// The old shape no longer fits.
	_, err := d.Decode(5, pt.Insert(7, pt.Tuple(pt.Text("3"), pt.Null(), pt.Null())))
	e := wantClass(t, err, decode.ClassMalformed)
	if e.RelationOID != 7 || e.LSN != 5 {
		t.Fatalf("error fields = %+v", e)
	}
}

func TestDecodeMessageAndTruncate(t *testing.T) {
	d := pgoutput.NewDecoder()
	mustDecode(t, d, tasksRel(10))
	mustDecode(t, d, pt.Relation(11, "app", "notes", 'f', pt.Col{Name: "id", TypeOID: 23, Key: true}))
	m := mustDecode(t, d, pt.Message(true, 0xABC, decode.PrefixFence, []byte(`{"v":1}`))).(*decode.LogicalMessage)
	if !m.Transactional || m.LSN != 0xABC || m.Prefix != decode.PrefixFence || string(m.Content) != `{"v":1}` {
		t.Fatalf("message = %+v", m)
	}
	m = mustDecode(t, d, pt.Message(false, 1, "other", nil)).(*decode.LogicalMessage)
	if m.Transactional || m.Prefix != "other" || len(m.Content) != 0 {
		t.Fatalf("message = %+v", m)
	}
	tr := mustDecode(t, d, pt.Truncate(3, 10, 11)).(*decode.Truncate)
	if !tr.Cascade || !tr.RestartIdentity || len(tr.Relations) != 2 || tr.Relations[0].OID != 10 || tr.Relations[1].Name != "notes" {
		t.Fatalf("truncate = %+v", tr)
	}
	tr = mustDecode(t, d, pt.Truncate(0, 11)).(*decode.Truncate)
	if tr.Cascade || tr.RestartIdentity || len(tr.Relations) != 1 {
		t.Fatalf("truncate = %+v", tr)
	}
}

func TestUnknownRelation(t *testing.T) {
	for name, p := range map[string][]byte{
		"insert":   pt.Insert(99, pt.Tuple(pt.Text(secret))),
		"update":   pt.Update(99, 0, nil, pt.Tuple(pt.Text(secret))),
		"delete":   pt.Delete(99, 'K', pt.Tuple(pt.Text(secret))),
		"truncate": pt.Truncate(0, 10, 99),
	} {
		t.Run(name, func(t *testing.T) {
			d := pgoutput.NewDecoder()
			mustDecode(t, d, tasksRel(10))
			_, err := d.Decode(0x42, p)
			e := wantClass(t, err, decode.ClassUnknownRelation)
			if e.RelationOID != 99 || e.LSN != 0x42 {
				t.Fatalf("error fields = %+v", e)
			}
		})
	}
}

// validPayloads returns one payload of every kind, each valid after tasksRel(1).
func validPayloads() [][]byte {
	row := pt.Tuple(pt.Text("1"), pt.Text(secret), pt.Null())
	return [][]byte{
		pt.Begin(0x10, ts, 5),
		pt.Commit(0x10, 0x20, ts),
		pt.Origin(1, "o"),
		pt.Type(1, "n", "t"),
		tasksRel(1),
		pt.Relation(2, "s", "empty", 'n'),
		pt.Insert(1, row),
		pt.Update(1, 0, nil, row),
		pt.Update(1, 'K', row, row),
		pt.Update(1, 'O', row, pt.Tuple(pt.Text("1"), pt.Toast(), pt.Bin([]byte(secret)))),
		pt.Delete(1, 'K', row),
		pt.Delete(1, 'O', row),
		pt.Truncate(1, 1),
		pt.Message(true, 3, "p", []byte(secret)),
		pt.Message(false, 3, "", nil),
	}
}

func TestMalformedNeverPanics(t *testing.T) {
	for i, p := range validPayloads() {
		d := pgoutput.NewDecoder()
		mustDecode(t, d, tasksRel(1))
		mustDecode(t, d, p) // the full payload is valid
		for n := 0; n < len(p); n++ {
			_, err := d.Decode(1, p[:n])
			if err == nil {
				t.Fatalf("payload %d (%c) truncated to %d bytes decoded", i, p[0], n)
			}
			wantClass(t, err, decode.ClassMalformed)
		}
		_, err := d.Decode(1, append(bytes.Clone(p), 0))
		wantClass(t, err, decode.ClassMalformed)
	}
}

func TestMalformedCases(t *testing.T) {
	hugeCol := append([]byte{'I', 0, 0, 0, 1, 'N', 0, 3, 't', 0xff, 0xff, 0xff, 0xff}, secret...)
	cases := []struct {
		name  string
		data  []byte
		class decode.Class
	}{
		{"empty", nil, decode.ClassMalformed},
		{"huge column length", hugeCol, decode.ClassMalformed},
		{"bad column kind", append(pt.Insert(1, pt.Tuple(pt.Text("1"), pt.Text(secret))), 'x'), decode.ClassMalformed},
		{"insert with old tuple marker", []byte{'I', 0, 0, 0, 1, 'K', 0, 0}, decode.ClassMalformed},
		{"insert column count mismatch", pt.Insert(1, pt.Tuple(pt.Text(secret))), decode.ClassMalformed},
		{"update K without N", []byte{'U', 0, 0, 0, 1, 'K', 0, 0, 'X', 0, 0}, decode.ClassMalformed},
		{"update invalid tuple marker", []byte{'U', 0, 0, 0, 1, 'Z', 0, 0}, decode.ClassMalformed},
		{"delete with N", []byte{'D', 0, 0, 0, 1, 'N', 0, 0}, decode.ClassMalformed},
		{"commit flags", []byte{'C', 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0}, decode.ClassMalformed},
		{"truncate zero relations", []byte{'T', 0, 0, 0, 0, 0}, decode.ClassMalformed},
		{"truncate huge count", []byte{'T', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1}, decode.ClassMalformed},
		{"truncate bad options", pt.Truncate(4, 1), decode.ClassMalformed},
		{"message bad flags", append([]byte{'M', 2}, pt.Message(true, 1, "p", nil)[2:]...), decode.ClassMalformed},
		{"message huge length", []byte{'M', 1, 0, 0, 0, 0, 0, 0, 0, 1, 'p', 0, 0xff, 0xff, 0xff, 0xff, 'S'}, decode.ClassMalformed},
		{"relation bad identity", pt.Relation(3, "s", "t", 'x'), decode.ClassMalformed},
		{"relation bad column flags", append(pt.Relation(3, "s", "t", 'd')[:len(pt.Relation(3, "s", "t", 'd'))-2], 0, 1, 2, 'c', 0, 0, 0, 0, 1, 0, 0, 0, 0), decode.ClassMalformed},
		{"relation string without NUL", []byte{'R', 0, 0, 0, 3, 's'}, decode.ClassMalformed},
		{"stream start", []byte{'S', 0, 0, 0, 1, 1}, decode.ClassStreamingUnsupported},
		{"stream stop", []byte{'E'}, decode.ClassStreamingUnsupported},
		{"stream commit", []byte{'c', 0, 0, 0, 1}, decode.ClassStreamingUnsupported},
		{"stream abort", []byte{'A', 0, 0, 0, 1, 0, 0, 0, 1}, decode.ClassStreamingUnsupported},
		{"begin prepare", []byte{'b', 0}, decode.ClassUnsupportedMessage},
		{"commit prepared", []byte{'K'}, decode.ClassUnsupportedMessage},
		{"unknown tag", []byte{'Z', 's', 'e', 'c'}, decode.ClassUnsupportedMessage},
		{"xlogdata header fed by mistake", []byte{'w', 0, 0, 0, 0, 0, 0, 0, 0}, decode.ClassUnsupportedMessage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := pgoutput.NewDecoder()
			mustDecode(t, d, tasksRel(1))
			msgs, err := d.Decode(0x77, tc.data)
			if msgs != nil {
				t.Fatalf("messages returned with error")
			}
			e := wantClass(t, err, tc.class)
			if e.LSN != 0x77 {
				t.Fatalf("lsn = %v", e.LSN)
			}
		})
	}
}

func TestRedactedFormatting(t *testing.T) {
	d := pgoutput.NewDecoder()
	mustDecode(t, d, tasksRel(1))
	row := mustDecode(t, d, pt.Insert(1, pt.Tuple(pt.Text("1"), pt.Text(secret), pt.Null()))).(*decode.Row)
	for _, s := range []string{row.New.String(), row.New.Values[1].String(), row.New.LogValue().String(), row.New.Values[1].LogValue().String()} {
		if strings.Contains(s, "SECRET") {
			t.Fatalf("formatting leaks: %q", s)
		}
	}
}

func TestStartOptionsAndCapabilities(t *testing.T) {
	d := pgoutput.NewDecoder()
	if d.Plugin() != "pgoutput" {
		t.Fatal(d.Plugin())
	}
	opts, err := d.StartOptions(`My"Pub's`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"proto_version '1'", `publication_names '"My""Pub''s"'`, "messages 'true'"}
	if !eq(opts, want) {
		t.Fatalf("options = %q", opts)
	}
	_, err = d.StartOptions("")
	wantClass(t, err, decode.ClassConfigInvalid)
	_, err = d.StartOptions("a\x00b")
	wantClass(t, err, decode.ClassConfigInvalid)

	if err := decode.CheckCapabilities(d, 160004); err != nil {
		t.Fatal(err)
	}
	if err := decode.CheckCapabilities(d, 0); err != nil {
		t.Fatal(err)
	}
	wantClass(t, decode.CheckCapabilities(d, 130010), decode.ClassCapabilityUnsupported)
	for _, c := range []decode.Capabilities{
		{Truncate: true, CommitLSN: true},
		{TransactionalMessages: true, CommitLSN: true},
		{TransactionalMessages: true, Truncate: true},
		{TransactionalMessages: true, Truncate: true, CommitLSN: true, Streaming: true},
	} {
		wantClass(t, decode.CheckCapabilities(fakeDecoder{c}, 0), decode.ClassCapabilityUnsupported)
	}
}

type fakeDecoder struct{ c decode.Capabilities }

func (fakeDecoder) Decode(pglogrepl.LSN, []byte) ([]decode.Message, error) { return nil, nil }
func (fakeDecoder) Plugin() string                                         { return "fake" }
func (fakeDecoder) StartOptions(string) ([]string, error)                  { return nil, nil }
func (f fakeDecoder) Capabilities() decode.Capabilities                    { return f.c }

func TestErrorIsAndClassOf(t *testing.T) {
	_, err := pgoutput.NewDecoder().Decode(0, []byte{'S'})
	if !errors.Is(err, &decode.Error{Class: decode.ClassStreamingUnsupported}) {
		t.Fatal("errors.Is by class failed")
	}
	if errors.Is(err, &decode.Error{Class: decode.ClassMalformed}) {
		t.Fatal("errors.Is matched another class")
	}
	if c, ok := decode.ClassOf(err); !ok || c != decode.ClassStreamingUnsupported {
		t.Fatal("ClassOf")
	}
	if _, ok := decode.ClassOf(errors.New("x")); ok {
		t.Fatal("ClassOf on foreign error")
	}
}
