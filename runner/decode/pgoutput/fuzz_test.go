package pgoutput_test

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/synchro/synchro/runner/collate"
	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/pgoutput"
	pt "github.com/synchro/synchro/runner/decode/pgtest"
)

type nopSink struct{}

func (nopSink) Begin(context.Context, collate.TxnHeader) error   { return nil }
func (nopSink) Event(context.Context, collate.Event) error       { return nil }
func (nopSink) Commit(context.Context, collate.TxnTrailer) error { return nil }

// frames encodes payloads as a sequence of [uint16 length][payload].
func frames(payloads ...[]byte) []byte {
	var out []byte
	for _, p := range payloads {
		out = binary.BigEndian.AppendUint16(out, uint16(len(p)))
		out = append(out, p...)
	}
	return out
}

func unframe(data []byte) [][]byte {
	var out [][]byte
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func checkErr(t *testing.T, err error) {
	t.Helper()
	var e *decode.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not *decode.Error", err, err)
	}
	if !slices.Contains(decode.Classes(), e.Class) {
		t.Fatalf("unbounded class %q", e.Class)
	}
	if e.Detail == "payload rejected by parser" {
		t.Fatal("structural check admitted a payload pglogrepl.Parse rejects")
	}
	if len(err.Error()) > 200 {
		t.Fatalf("unbounded error text (%d bytes)", len(err.Error()))
	}
}

// fid is a fence id of the seeds.
const fid = "6f1e2c3d-4b5a-4789-9abc-def012345678"

func fuzzSeeds() [][]byte {
	row := pt.Tuple(pt.Text("1"), pt.Text("v"), pt.Null())
	fenceContent := []byte(`{"v":2,"kind":"synced","relation_id":3,"schema":"public","table":"tasks","op":"insert","old_key":null,"new_key":"1","version":"x","fence_id":"` + fid + `","ordinal":1,"table_id":"tasks","pk":1,"mac":"0123456789abcdef0123456789abcdef"}`)
	seq := frames(
		pt.Begin(0x100, ts, 1),
		tasksRel(1),
		pt.Message(true, 1, decode.PrefixFence, fenceContent),
		pt.Insert(1, row),
		pt.Update(1, 'K', row, pt.Tuple(pt.Text("1"), pt.Toast(), pt.Null())),
		pt.Message(true, 2, decode.PrefixRegistry, []byte(`{"v":2,"generation":2,"previous":1,"mac":"0123456789abcdef0123456789abcdef"}`)),
		pt.Delete(1, 'O', row),
		pt.Truncate(1, 1),
		pt.Commit(0x100, 0x110, ts),
	)
	// The same transaction with its fence in wire format 3 (compactwire.go).
	compact := frames(
		pt.Begin(0x100, ts, 1),
		tasksRel(1),
		// runner/decode's compactFence of that fence.
		pt.Message(true, 1, decode.PrefixFence,
			[]byte("1:31:s1:36:public5:tasks1:i1:11:x36:"+fid+"1:15:tasks1:n5d0c9e1f2a3b4c5d6e7f80912a3b4c5d")),
		pt.Insert(1, row),
		pt.Commit(0x100, 0x110, ts),
	)
	seeds := [][]byte{seq, compact, frames(pt.Begin(0x100, ts, 1), pt.Begin(0x200, ts, 2))}
	for _, p := range validPayloads() {
		seeds = append(seeds, p, frames(tasksRel(1), pt.Begin(0x10, ts, 1), p))
	}
	return seeds
}

// FuzzDecode feeds arbitrary bytes to Decoder.Decode, both as one payload and
// as a framed sequence of payloads through a Collator. It must never panic,
// and every failure must be a bounded, value-free *decode.Error.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// One payload, against a decoder that knows relation 1.
		d := pgoutput.NewDecoder()
		if _, err := d.Decode(1, tasksRel(1)); err != nil {
			t.Fatal(err)
		}
		msgs, err := d.Decode(2, data)
		if err != nil {
			checkErr(t, err)
			if msgs != nil {
				t.Fatal("messages with error")
			}
		} else if len(msgs) != 1 || msgs[0] == nil {
			t.Fatalf("%d messages", len(msgs))
		}

		// A framed sequence through a fresh decoder and a collator.
		d = pgoutput.NewDecoder()
		c := collate.New(nopSink{})
		ctx := context.Background()
		for i, p := range unframe(data) {
			lsn := pglogrepl.LSN(i + 1)
			msgs, err := d.Decode(lsn, p)
			if err != nil {
				checkErr(t, err)
				continue
			}
			if err := c.Feed(ctx, lsn, msgs); err != nil {
				checkErr(t, err)
				break
			}
		}
	})
}
