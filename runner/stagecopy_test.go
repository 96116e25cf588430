package runner

import (
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode"
)

// stageColumnTypes are the stage table's column types (runner_stage_open), in
// StageColumns order.
var stageColumnTypes = []uint32{
	pgtype.Int4OID, pgtype.Int4OID, pgtype.QCharOID, pgtype.Int4OID, pgtype.OIDOID, pgtype.TextOID, pgtype.TextOID,
	pgtype.QCharOID, pgtype.TextArrayOID, 1028 /* oid[] */, pgtype.BoolArrayOID, pgtype.JSONBOID, pgtype.JSONBOID,
	pgtype.TextArrayOID, 1028, pgtype.TextOID, pgtype.TextOID, pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID,
	pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.UUIDOID, pgtype.Int8OID, pgtype.TextOID,
	pgtype.Int8OID, pgtype.Int8OID, pgtype.Int4OID,
}

// The binary COPY tuple of every kind of staged row holds, column by column, exactly
// the bytes pgx's binary encoder writes for the row's Values (what pgx.CopyFrom
// sent before the stager encoded its own stream).
func TestRunnerStageBinaryMatchesPgx(t *testing.T) {
	t.Parallel()
	require.Len(t, stageColumnTypes, len(StageColumns))
	s := testStager()
	rel := testRelation()
	var rows []StageRow
	var err error
	rows, err = s.Row(rows, 1, &decode.Row{Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew,
		Values: []decode.Value{text("42"), text("a \"q\" ü\n"), text(`{"a":[1,null]}`), null, toast}}})
	require.NoError(t, err)
	rows, err = s.Row(rows, 2, &decode.Row{Op: decode.OpDelete, Relation: rel, Old: &decode.Tuple{Kind: decode.TupleKey,
		Values: []decode.Value{text("7"), null, null, null, null}}})
	require.NoError(t, err)
	empty := &decode.Relation{OID: 7, Namespace: "public", Name: "e", ReplicaIdentity: decode.ReplicaIdentityFull}
	rows, err = s.Truncate(rows, 3, &decode.Truncate{Relations: []*decode.Relation{rel, empty}})
	require.NoError(t, err)
	k, old := "42", "41"
	rows = s.Fence(rows, &decode.Fence{Kind: decode.FenceSynced, RelationID: 9, Schema: "public", Table: "tasks", Op: "update",
		OldKey: &old, NewKey: &k, Version: "0000000000000001-0000000000000002", FenceID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		Ordinal: 1 << 40, TableID: "tasks"})
	rows = s.Fence(rows, &decode.Fence{Kind: decode.FenceCaptureDependency, RelationID: 9, Schema: "public", Table: "tasks",
		Op: "delete", OldKey: &k, Version: "v", FenceID: "not a uuid", Ordinal: 2, TableID: "ignored"})
	prev := int64(3)
	rows = s.Activation(rows, &decode.Activation{Generation: 4, Previous: &prev})
	rows = s.Activation(rows, &decode.Activation{Generation: 1})
	kinds := ""
	for _, r := range rows {
		kinds += string(r.Kind)
	}
	require.Equal(t, "RIDRTMMMM", kinds, "every kind of staged row, an empty column list too")

	m := pgtype.NewMap()
	for _, r := range rows {
		got := r.AppendBinary(nil)
		require.Equal(t, len(StageColumns), int(binary.BigEndian.Uint16(got)))
		got = got[2:]
		for i, v := range r.Values() {
			var want []byte
			if v != nil {
				want, err = m.Encode(stageColumnTypes[i], pgtype.BinaryFormatCode, v, nil)
				require.NoError(t, err, StageColumns[i])
			}
			n := int32(binary.BigEndian.Uint32(got))
			got = got[4:]
			if want == nil {
				require.Equal(t, int32(-1), n, "%c %s is NULL", r.Kind, StageColumns[i])
				continue
			}
			require.Equal(t, int32(len(want)), n, "%c %s length", r.Kind, StageColumns[i])
			require.Equal(t, want, got[:n], "%c %s", r.Kind, StageColumns[i])
			got = got[n:]
		}
		require.Empty(t, got)
	}

	// The stream: header, the tuples, the trailer, through reads of any size; the
	// midpoint hook runs once.
	mids := 0
	var want []byte
	want = append(want, copyHeader...)
	for _, r := range rows {
		want = r.AppendBinary(want)
	}
	want = append(want, copyTrailer...)
	for _, size := range []int{1, 7, 64 << 10} {
		rd := newStageReader(rows, nil, func() { mids++ })
		var out []byte
		p := make([]byte, size)
		for {
			n, err := rd.Read(p)
			out = append(out, p[:n]...)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		require.Equal(t, want, out)
	}
	require.Equal(t, 3, mids)
}

// BenchmarkStageEncode: the staged rows of a 1-row source transaction (its row and
// its fence; the Relation row is staged once per batch) encoded for COPY by pgx's
// binary encoder from Values (what pgx.CopyFrom did: the baseline) and by
// AppendBinary, in the same run; reports both per row and their ratio.
//
//	go test ./runner -run '^$' -bench StageEncode
func BenchmarkStageEncode(b *testing.B) {
	s := testStager()
	rel := testRelation()
	rows, err := s.Row(nil, 1, &decode.Row{Op: decode.OpInsert, Relation: rel, New: &decode.Tuple{Kind: decode.TupleNew,
		Values: []decode.Value{text("42"), text("o17"), text(`{"a":1}`), null, text("synchro-bench-payload-0123456789abcdef0123456789abcdef0123456789")}}})
	require.NoError(b, err)
	k := "42"
	rows = s.Fence(rows[1:], &decode.Fence{Kind: decode.FenceSynced, RelationID: 9, Schema: "public", Table: "tasks", Op: "insert",
		NewKey: &k, Version: "0000000000000001-0000000000000002", FenceID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Ordinal: 1, TableID: "tasks"})
	m := pgtype.NewMap()
	var buf []byte
	pgx := func() {
		for i := range rows {
			buf = binary.BigEndian.AppendUint16(buf[:0], uint16(len(StageColumns)))
			for c, v := range rows[i].Values() {
				if v == nil {
					buf = appendNull(buf)
					continue
				}
				at := len(buf)
				buf = append(buf, 0, 0, 0, 0)
				buf, err = m.Encode(stageColumnTypes[c], pgtype.BinaryFormatCode, v, buf)
				if err != nil {
					b.Fatal(err)
				}
				binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
			}
		}
	}
	own := func() {
		for i := range rows {
			buf = rows[i].AppendBinary(buf[:0])
		}
	}
	var tPgx, tOwn time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		pgx()
		t1 := time.Now()
		own()
		tOwn += time.Since(t1)
		tPgx += t1.Sub(t0)
	}
	n := float64(b.N * len(rows))
	b.ReportMetric(float64(tPgx.Nanoseconds())/n, "pgx-ns/row")
	b.ReportMetric(float64(tOwn.Nanoseconds())/n, "own-ns/row")
	b.ReportMetric(float64(tOwn)/float64(tPgx), "own/pgx")
}
