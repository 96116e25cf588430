package runner

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode"
)

func testRelation() *decode.Relation {
	return &decode.Relation{
		OID: 16384, Namespace: "public", Name: "tasks", ReplicaIdentity: decode.ReplicaIdentityDefault,
		Columns: []decode.Column{
			{Name: "id", TypeOID: 20, Key: true},
			{Name: "title", TypeOID: 25},
			{Name: "meta", TypeOID: oidJSONB},
			{Name: "doc", TypeOID: oidJSON},
			{Name: "body", TypeOID: 25},
		},
	}
}

// testStager stages every column of testRelation (all registered).
func testStager() *Stager {
	s := NewStager()
	s.SetRegistered(map[uint32]map[string]struct{}{
		16384: {"id": {}, "title": {}, "meta": {}, "doc": {}, "body": {}},
	})
	return s
}

// Only registered columns (and the key) are staged; a relation nobody registered
// stages its key only. The relation row keeps every column (drift checks).
func TestRunnerStagerStagesRegisteredColumnsOnly(t *testing.T) {
	t.Parallel()
	s := NewStager()
	s.SetRegistered(map[uint32]map[string]struct{}{16384: {"id": {}, "title": {}}})
	rel := testRelation()
	row := &decode.Row{Op: decode.OpUpdate, Relation: rel,
		New: &decode.Tuple{Kind: decode.TupleNew, Values: []decode.Value{
			text("42"), text("t"), text(`{"a":"\u0000"}`), text("not json at all"), toast}}}
	out, err := s.Row(nil, 0, row)
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Equal(t, []string{"id", "title", "meta", "doc", "body"}, out[0].ColNames)
	require.JSONEq(t, `{"id": 42, "title": "t"}`, string(out[len(out)-1].NewRow))
	require.Nil(t, out[1].Toast, "an unregistered unchanged-TOAST column is not listed")

	other := *rel
	other.OID = 999
	row.Relation = &other
	out, err = s.Row(nil, 1, row)
	require.NoError(t, err)
	require.JSONEq(t, `{"id": 42}`, string(out[len(out)-1].NewRow))
	require.False(t, s.Registered(999))
	require.True(t, s.Registered(16384))
}

func text(s string) decode.Value { return decode.Value{Kind: decode.ValueText, Data: []byte(s)} }

var (
	null  = decode.Value{Kind: decode.ValueNull}
	toast = decode.Value{Kind: decode.ValueUnchangedToast}
)

func TestRunnerStagerInsertEncodesValues(t *testing.T) {
	t.Parallel()
	s := testStager()
	rel := testRelation()
	row := &decode.Row{Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew, Values: []decode.Value{
		text("42"), text("a \"quoted\"\\ line\nwith\ttab \x01 and ünïcode"), text(`{"b": [1, 2.50, null]}`), text(` {"x" : 1} `), null,
	}}}
	out, err := s.Row(nil, 0, row)
	require.NoError(t, err)
	require.Len(t, out, 2)

	r := out[0]
	require.Equal(t, int32(0), r.Seq)
	require.Equal(t, StageRelation, r.Kind)
	require.Nil(t, r.EventOrdinal)
	require.Equal(t, uint32(16384), *r.RelID)
	require.Equal(t, "public", *r.Nspname)
	require.Equal(t, "tasks", *r.Relname)
	require.Equal(t, byte('d'), *r.Replident)
	require.Equal(t, []string{"id", "title", "meta", "doc", "body"}, r.ColNames)
	require.Equal(t, []uint32{20, 25, 3802, 114, 25}, r.ColTypes)
	require.Equal(t, []bool{true, false, false, false, false}, r.ColKeys)

	i := out[1]
	require.Equal(t, int32(1), i.Seq)
	require.Equal(t, StageInsert, i.Kind)
	require.Equal(t, int32(0), *i.EventOrdinal)
	require.Equal(t, uint32(16384), *i.RelID)
	require.Nil(t, i.OldRow)
	require.Nil(t, i.Toast)
	var got map[string]any
	require.NoError(t, json.Unmarshal(i.NewRow, &got))
	require.Equal(t, map[string]any{
		"id":    float64(42),
		"title": "a \"quoted\"\\ line\nwith\ttab \x01 and ünïcode",
		"meta":  map[string]any{"b": []any{1.0, 2.5, nil}},
		"doc":   map[string]any{"x": 1.0},
		"body":  nil,
	}, got)
	require.True(t, json.Valid(i.NewRow))
	require.Contains(t, string(i.NewRow), `"title":"a \"quoted\"\\ line\nwith\ttab \u0001 and ünïcode"`)
	require.Contains(t, string(i.NewRow), `"meta":{"b": [1, 2.50, null]}`, "json values are kept as sent")
}

func TestRunnerStagerRelationOncePerBatchAndShape(t *testing.T) {
	t.Parallel()
	s := testStager()
	rel := testRelation()
	ins := func(ord uint64, r *decode.Relation) *decode.Row {
		return &decode.Row{Op: decode.OpInsert, Relation: r, New: &decode.Tuple{Kind: decode.TupleNew,
			Values: []decode.Value{text("1"), null, null, null, null}}}
	}
	var out []StageRow
	var err error
	out, err = s.Row(out, 0, ins(0, rel))
	require.NoError(t, err)
	out, err = s.Row(out, 1, ins(1, rel))
	require.NoError(t, err)
	kinds := func() string {
		b := make([]byte, len(out))
		for i, r := range out {
			b[i] = r.Kind
		}
		return string(b)
	}
	require.Equal(t, "RII", kinds())

	// A new Relation message for the same OID (DDL in the transaction) is staged again.
	changed := *rel
	changed.ReplicaIdentity = decode.ReplicaIdentityFull
	out, err = s.Row(out, 2, ins(2, &changed))
	require.NoError(t, err)
	require.Equal(t, "RIIRI", kinds())

	// The next transaction of the batch restarts seq and carries its own index; a
	// shape staged earlier in the batch is not staged again, a new one is.
	require.Equal(t, int32(0), out[0].Txn)
	s.Reset(1)
	out, err = s.Row(out[:0], 0, ins(0, &changed))
	require.NoError(t, err)
	require.Equal(t, "I", kinds())
	require.Equal(t, int32(0), out[0].Seq)
	require.Equal(t, int32(1), out[0].Txn)
	out, err = s.Row(out, 1, ins(1, rel))
	require.NoError(t, err)
	require.Equal(t, "IRI", kinds(), "the first shape again: a new Relation message")

	// A new batch stages every shape again before its first use.
	s.NewBatch()
	s.Reset(0)
	out, err = s.Row(out[:0], 0, ins(0, rel))
	require.NoError(t, err)
	require.Equal(t, "RI", kinds())
	require.Equal(t, int32(0), out[0].Seq)
	require.Equal(t, int32(1), out[1].Seq)
	require.Equal(t, int32(0), out[0].Txn)
	require.Equal(t, int32(0), out[1].Txn)
}

func TestRunnerStagerUpdateDeleteToastAndOldImages(t *testing.T) {
	t.Parallel()
	s := testStager()
	rel := testRelation()
	up := &decode.Row{Op: decode.OpUpdate, Relation: rel,
		Old: &decode.Tuple{Kind: decode.TupleKey, Values: []decode.Value{text("7"), null, null, null, null}},
		New: &decode.Tuple{Kind: decode.TupleNew, Values: []decode.Value{text("7"), text("t"), null, null, toast}},
	}
	out, err := s.Row(nil, 3, up)
	require.NoError(t, err)
	u := out[1]
	require.Equal(t, StageUpdate, u.Kind)
	require.Equal(t, int32(3), *u.EventOrdinal)
	require.JSONEq(t, `{"id":7,"title":"t","meta":null,"doc":null}`, string(u.NewRow))
	require.Equal(t, []string{"body"}, u.Toast)
	require.JSONEq(t, `{"id":7}`, string(u.OldRow), "a key-only image carries only key columns")

	del := &decode.Row{Op: decode.OpDelete, Relation: rel,
		Old: &decode.Tuple{Kind: decode.TupleOld, Values: []decode.Value{text("7"), text("t"), null, null, null}}}
	out, err = s.Row(out, 4, del)
	require.NoError(t, err)
	d := out[2]
	require.Equal(t, StageDelete, d.Kind)
	require.Equal(t, int32(2), d.Seq)
	require.Nil(t, d.NewRow)
	require.JSONEq(t, `{"id":7,"title":"t","meta":null,"doc":null,"body":null}`, string(d.OldRow))
}

func TestRunnerStagerTruncateAndMessages(t *testing.T) {
	t.Parallel()
	s := testStager()
	a, b := testRelation(), testRelation()
	b.OID, b.Name = 16390, "other"
	out, err := s.Truncate(nil, 5, &decode.Truncate{Relations: []*decode.Relation{a, b}})
	require.NoError(t, err)
	require.Len(t, out, 3)
	require.Equal(t, StageRelation, out[0].Kind)
	require.Equal(t, StageRelation, out[1].Kind)
	tr := out[2]
	require.Equal(t, StageTruncate, tr.Kind)
	require.Equal(t, int32(5), *tr.EventOrdinal)
	require.Equal(t, []uint32{16384, 16390}, tr.Truncated)
	require.Nil(t, tr.RelID)

	newKey := "7"
	f := &decode.Fence{Kind: decode.FenceSynced, RelationID: 3, Schema: "public", Table: "tasks", Op: decode.FenceInsert,
		NewKey: &newKey, Version: "v1", FenceID: "6f1e2c3d-4b5a-4789-9abc-def012345678", Ordinal: 11, TableID: "tasks",
		PK: &decode.PrimaryKey{Str: "7"}}
	prev := int64(1)
	out = s.Fence(out, f)
	out = s.Activation(out, &decode.Activation{Generation: 2, Previous: &prev})
	require.Len(t, out, 5)
	m := out[3]
	require.Equal(t, StageMessage, m.Kind)
	require.Equal(t, int32(3), m.Seq)
	require.Equal(t, "synchro.fence", *m.Prefix)
	require.Nil(t, m.EventOrdinal)
	v := m.Values()
	require.Len(t, v, len(StageColumns))
	col := func(name string) any {
		for i, c := range StageColumns {
			if c == name {
				return v[i]
			}
		}
		t.Fatalf("no stage column %s", name)
		return nil
	}
	require.Equal(t, "synced", col("f_kind"))
	require.Equal(t, int64(3), col("f_relation_id"))
	require.Equal(t, "insert", col("f_op"))
	require.Nil(t, col("f_old_key"))
	require.Equal(t, "7", col("f_new_key"))
	require.Equal(t, [16]byte{0x6f, 0x1e, 0x2c, 0x3d, 0x4b, 0x5a, 0x47, 0x89, 0x9a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78},
		col("f_fence_id"))
	require.Equal(t, int64(11), col("f_ordinal"))
	require.Equal(t, "tasks", col("f_table_id"))
	require.Nil(t, col("a_generation"))
	act := out[4]
	require.Equal(t, "synchro.registry", *act.Prefix)
	v = act.Values()
	require.Equal(t, int64(2), col("a_generation"))
	require.Equal(t, int64(1), col("a_previous"))
	require.Nil(t, col("f_kind"))
}

func TestRunnerStagerRefusesWhatItCannotRepresent(t *testing.T) {
	t.Parallel()
	rel := testRelation()
	cases := map[string]*decode.Row{
		"invalid utf8": {Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew,
			Values: []decode.Value{text("1"), {Kind: decode.ValueText, Data: []byte{0xff, 0xfe}}, null, null, null}}},
		"bad json": {Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew,
			Values: []decode.Value{text("1"), null, text("{nope"), null, null}}},
		"binary": {Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew,
			Values: []decode.Value{{Kind: decode.ValueBinary, Data: []byte{1}}, null, null, null, null}}},
		"short tuple": {Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew,
			Values: []decode.Value{text("1")}}},
		"no relation": {Op: decode.OpInsert},
	}
	for name, row := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := testStager().Row(nil, 0, row)
			c, ok := decode.ClassOf(err)
			require.True(t, ok, "want a decode error, got %v", err)
			require.Equal(t, decode.ClassMalformed, c)
			require.NotContains(t, err.Error(), "nope", "errors carry no values")
		})
	}
}

func TestRunnerStageRowValuesOrder(t *testing.T) {
	t.Parallel()
	out, err := testStager().Row(nil, 9, &decode.Row{Op: decode.OpInsert, Relation: testRelation(),
		New: &decode.Tuple{Kind: decode.TupleNew, Values: []decode.Value{text("1"), null, null, null, toast}}})
	require.NoError(t, err)
	v := out[1].Values()
	require.Len(t, v, len(StageColumns))
	require.Equal(t, int32(0), v[0]) // txn
	require.Equal(t, int32(1), v[1])
	require.Equal(t, byte('I'), v[2])
	require.Equal(t, int32(9), v[3])
	require.Equal(t, uint32(16384), v[4])
	require.Nil(t, v[5])     // nspname
	require.Nil(t, v[8])     // col_names
	require.NotNil(t, v[11]) // new_row
	require.Nil(t, v[12])    // old_row
	require.Equal(t, []string{"body"}, v[13])
	for i := 14; i < len(v)-1; i++ {
		require.Nil(t, v[i], StageColumns[i])
	}
	require.Equal(t, "pair_no", StageColumns[len(v)-1])
	require.Equal(t, int32(1), v[len(v)-1]) // the transaction's first row event
}

// The stager numbers a transaction's row events, and its fences while their ordinals
// rise, each from 1 in decoded order (StageRow.PairNo), and starts again at every
// transaction; relation, truncate and registry rows get no number. A fence whose
// ordinal does not rise stops the fences' numbering for the rest of the transaction:
// materialization then pairs that transaction by rank.
func TestRunnerStagerPairNumbers(t *testing.T) {
	t.Parallel()
	s := testStager()
	rel := testRelation()
	key := func(k string) *string { return &k }
	fence := func(ord int64) *decode.Fence {
		return &decode.Fence{Kind: decode.FenceSynced, RelationID: 3, Schema: "public", Table: "tasks",
			Op: decode.FenceInsert, NewKey: key("1"), Version: "v", FenceID: "6f1e2c3d-4b5a-4789-9abc-def012345678",
			Ordinal: ord, TableID: "tasks"}
	}
	insert := func(out []StageRow, id string) []StageRow {
		out, err := s.Row(out, 1, &decode.Row{Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew,
			Values: []decode.Value{text(id), null, null, null, null}}})
		require.NoError(t, err)
		return out
	}
	nums := func(rows []StageRow) []any {
		var n []any
		for _, r := range rows {
			n = append(n, nullable(r.PairNo))
		}
		return n
	}

	s.Reset(0)
	out := insert(nil, "1") // R, I
	out = insert(out, "2")
	out = s.Fence(out, fence(10))
	out = s.Fence(out, fence(11))
	out, err := s.Truncate(out, 3, &decode.Truncate{Relations: []*decode.Relation{rel}})
	require.NoError(t, err)
	out = s.Activation(out, &decode.Activation{Generation: 2})
	require.Equal(t, []any{nil, int32(1), int32(2), int32(1), int32(2), nil, nil}, nums(out))

	// A new transaction numbers from 1 again; a fence whose ordinal falls (or repeats)
	// gets no number, nor does any later fence of the transaction, even a rising one.
	s.Reset(1)
	out = insert(nil, "3")
	out = s.Fence(out, fence(7))
	out = s.Fence(out, fence(7))
	out = s.Fence(out, fence(20))
	out = insert(out, "4")
	require.Equal(t, []any{int32(1), int32(1), nil, nil, int32(2)}, nums(out))

	s.Reset(2)
	out = s.Fence(nil, fence(5))
	require.Equal(t, []any{int32(1)}, nums(out), "numbering restarts after a transaction that stopped it")
}

// Integers and booleans are staged as the JSON values to_jsonb() gives them (the
// image's shape, synchro._image_sql); text that is not their type's output is
// malformed, never staged as something else.
func TestRunnerStagerTypedValues(t *testing.T) {
	t.Parallel()
	rel := &decode.Relation{OID: 1, Namespace: "public", Name: "n", Columns: []decode.Column{
		{Name: "id", TypeOID: oidInt8, Key: true}, {Name: "s", TypeOID: oidInt2}, {Name: "i", TypeOID: oidInt4},
		{Name: "b", TypeOID: oidBool}, {Name: "c", TypeOID: 1700}}}
	s := NewStager()
	s.SetRegistered(map[uint32]map[string]struct{}{1: {"id": {}, "s": {}, "i": {}, "b": {}, "c": {}}})
	row := func(vals ...decode.Value) *decode.Row {
		return &decode.Row{Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew, Values: vals}}
	}
	out, err := s.Row(nil, 0, row(text("-9223372036854775808"), text("0"), text("-1"), text("f"), text("1.50")))
	require.NoError(t, err)
	require.JSONEq(t, `{"id": -9223372036854775808, "s": 0, "i": -1, "b": false, "c": "1.50"}`, string(out[len(out)-1].NewRow))
	out, err = s.Row(nil, 1, row(text("9223372036854775807"), null, null, text("t"), null))
	require.NoError(t, err)
	require.JSONEq(t, `{"id": 9223372036854775807, "s": null, "i": null, "b": true, "c": null}`, string(out[len(out)-1].NewRow))
	for _, bad := range [][]decode.Value{
		{text("1e3"), null, null, null, null},
		{text("-"), null, null, null, null},
		{text("01234567890123456789"), null, null, null, null},
		{text("1"), text(" 1"), null, null, null},
		{text("1"), null, text(""), null, null},
		{text("1"), null, null, text("true"), null},
	} {
		_, err := s.Row(nil, 2, row(bad...))
		var de *decode.Error
		require.ErrorAs(t, err, &de, "%q", bad)
		require.Equal(t, decode.ClassMalformed, de.Class)
	}
}
