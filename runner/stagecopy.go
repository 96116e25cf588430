package runner

import (
	"encoding/binary"
	"io"
	"strings"

	"github.com/synchro/synchro/runner/decode"
)

// The stage's rows go to the server as a binary COPY stream encoded here, column by
// column in StageColumns order, not through pgx.CopyFrom: its per-value encode plan
// lookup and the boxing of every value into an interface cost about a fifth of the
// runner's Go CPU in a backlog (go tool pprof of `synchro-bench --suite materialize
// --cpuprofile`, docs/benchmarks.md). Each column's bytes are exactly what pgx's
// binary encoder writes for the same value (TestRunnerStageBinaryMatchesPgx).

// Element type OIDs of the stage's array columns (oidBool: stage.go).
const (
	oidText = 25
	oidOID  = 26
)

// stageCopySQL copies a binary stream into the stage table.
var stageCopySQL = "COPY pg_temp.synchro_stage (" + strings.Join(StageColumns, ", ") + ") FROM STDIN (FORMAT binary)"

// copyHeader is the binary COPY signature, flags and header extension length.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// copyTrailer ends a binary COPY stream: a field count of -1.
var copyTrailer = []byte{0xff, 0xff}

func appendNull(b []byte) []byte { return binary.BigEndian.AppendUint32(b, 0xffffffff) }

func appendInt32(b []byte, v int32) []byte {
	b = binary.BigEndian.AppendUint32(b, 4)
	return binary.BigEndian.AppendUint32(b, uint32(v))
}

func appendInt64(b []byte, v int64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(v))
}

func appendChar(b []byte, c byte) []byte {
	b = binary.BigEndian.AppendUint32(b, 1)
	return append(b, c)
}

func appendText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendInt32Ptr(b []byte, p *int32) []byte {
	if p == nil {
		return appendNull(b)
	}
	return appendInt32(b, *p)
}

func appendTextPtr(b []byte, p *string) []byte {
	if p == nil {
		return appendNull(b)
	}
	return appendText(b, *p)
}

// appendJSONB writes JSON text as jsonb (format version 1); nil is NULL.
func appendJSONB(b []byte, j []byte) []byte {
	if j == nil {
		return appendNull(b)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(j)+1))
	b = append(b, 1)
	return append(b, j...)
}

// appendArray writes a one-dimensional array without NULL elements: n elements of
// type elem, each appended by one(i) with its length prefix. An empty array is one
// dimension of length 0, as pgx writes it (the server reads it as '{}').
func appendArray(b []byte, elem uint32, n int, one func(b []byte, i int) []byte) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0) // length, set below
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint32(b, 1)
	for i := 0; i < n; i++ {
		b = one(b, i)
	}
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

func appendTextArray(b []byte, s []string) []byte {
	if s == nil {
		return appendNull(b)
	}
	return appendArray(b, oidText, len(s), func(b []byte, i int) []byte { return appendText(b, s[i]) })
}

func appendOIDArray(b []byte, s []uint32) []byte {
	if s == nil {
		return appendNull(b)
	}
	return appendArray(b, oidOID, len(s), func(b []byte, i int) []byte {
		b = binary.BigEndian.AppendUint32(b, 4)
		return binary.BigEndian.AppendUint32(b, s[i])
	})
}

func appendBoolArray(b []byte, s []bool) []byte {
	if s == nil {
		return appendNull(b)
	}
	return appendArray(b, oidBool, len(s), func(b []byte, i int) []byte {
		v := byte(0)
		if s[i] {
			v = 1
		}
		return appendChar(b, v)
	})
}

// AppendBinary appends the row as one binary COPY tuple, columns in StageColumns
// order, with the values Values gives.
func (s *StageRow) AppendBinary(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(StageColumns)))
	b = appendInt32(b, s.Txn)
	b = appendInt32(b, s.Seq)
	b = appendChar(b, s.Kind)
	b = appendInt32Ptr(b, s.EventOrdinal)
	if s.RelID == nil {
		b = appendNull(b)
	} else {
		b = appendInt32(b, int32(*s.RelID))
	}
	b = appendTextPtr(b, s.Nspname)
	b = appendTextPtr(b, s.Relname)
	if s.Replident == nil {
		b = appendNull(b)
	} else {
		b = appendChar(b, *s.Replident)
	}
	b = appendTextArray(b, s.ColNames)
	b = appendOIDArray(b, s.ColTypes)
	b = appendBoolArray(b, s.ColKeys)
	b = appendJSONB(b, s.NewRow)
	b = appendJSONB(b, s.OldRow)
	b = appendTextArray(b, s.Toast)
	b = appendOIDArray(b, s.Truncated)
	b = appendTextPtr(b, s.Prefix)
	if f := s.Fence; f != nil {
		b = appendText(b, string(f.Kind))
		b = appendInt64(b, f.RelationID)
		b = appendText(b, f.Schema)
		b = appendText(b, f.Table)
		b = appendText(b, string(f.Op))
		b = appendTextPtr(b, f.OldKey)
		b = appendTextPtr(b, f.NewKey)
		b = appendText(b, f.Version)
		if u, ok := uuidBytes(f.FenceID).([16]byte); ok {
			b = binary.BigEndian.AppendUint32(b, 16)
			b = append(b, u[:]...)
		} else {
			b = appendNull(b)
		}
		b = appendInt64(b, f.Ordinal)
		if f.Kind == decode.FenceSynced {
			b = appendText(b, f.TableID)
		} else {
			b = appendNull(b)
		}
	} else {
		for range 11 {
			b = appendNull(b)
		}
	}
	if a := s.Activation; a != nil {
		b = appendInt64(b, a.Generation)
		if a.Previous == nil {
			b = appendNull(b)
		} else {
			b = appendInt64(b, *a.Previous)
		}
	} else {
		b = appendNull(b)
		b = appendNull(b)
	}
	return appendInt32Ptr(b, s.PairNo)
}

// stageReader streams rows as a binary COPY of the stage, encoding them as the
// server reads (no second copy of the batch in memory). mid, when set, runs once
// when half the rows are encoded (the fault point of a COPY in progress).
type stageReader struct {
	rows []StageRow
	next int
	buf  []byte
	off  int
	done bool
	mid  func()
}

func newStageReader(rows []StageRow, buf []byte, mid func()) *stageReader {
	return &stageReader{rows: rows, buf: append(buf[:0], copyHeader...), mid: mid}
}

// Read fills p with the stream: whole encoded rows are buffered, then copied out.
func (r *stageReader) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.done {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for len(r.buf) < 32<<10 && r.next < len(r.rows) {
			r.buf = r.rows[r.next].AppendBinary(r.buf)
			r.next++
			if r.mid != nil && r.next == (len(r.rows)+1)/2 {
				r.mid()
				r.mid = nil
			}
		}
		if r.next == len(r.rows) {
			r.buf = append(r.buf, copyTrailer...)
			r.done = true
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}
