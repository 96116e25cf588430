package pgoutput

import (
	"bytes"
	"encoding/binary"
	"github.com/synchro/synchro/runner/decode"
)

// The structural check below walks a pgoutput protocol-1 payload with full
// bounds checking and requires the payload to be consumed exactly. Only a
// payload that passes it is handed to pglogrepl.Parse, which trusts lengths
// and would otherwise panic (or allocate up to 4 GiB) on hostile input.

// reader is a bounds-checked cursor. Every method reports false instead of
// reading past the end.
type reader struct {
	b   []byte
	off int
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) skip(n int) bool {
	if n < 0 || r.remaining() < n {
		return false
	}
	r.off += n
	return true
}

func (r *reader) u8() (byte, bool) {
	if r.remaining() < 1 {
		return 0, false
	}
	v := r.b[r.off]
	r.off++
	return v, true
}

func (r *reader) u16() (uint16, bool) {
	if r.remaining() < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v, true
}

func (r *reader) u32() (uint32, bool) {
	if r.remaining() < 4 {
		return 0, false
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v, true
}

// cstring skips a NUL-terminated string.
func (r *reader) cstring() bool {
	i := bytes.IndexByte(r.b[r.off:], 0)
	if i < 0 {
		return false
	}
	r.off += i + 1
	return true
}

// tuple checks one TupleData and returns its column count.
func (r *reader) tuple() (int, string) {
	n, ok := r.u16()
	if !ok {
		return 0, "short tuple header"
	}
	// A registered relation always has a key column, and pglogrepl.Parse
	// refuses an insert whose tuple has none: refuse it here too, so the
	// check and the parser agree (fuzz seed a193e8acaa066b8f).
	if n == 0 {
		return 0, "tuple without columns"
	}
	for range int(n) {
		kind, ok := r.u8()
		if !ok {
			return 0, "short tuple column"
		}
		switch kind {
		case 'n', 'u':
		case 't', 'b':
			l, ok := r.u32()
			if !ok || uint64(l) > uint64(r.remaining()) {
				return 0, "tuple column length exceeds payload"
			}
			r.off += int(l)
		default:
			return 0, "invalid tuple column kind"
		}
	}
	return int(n), ""
}

// checkFrame validates the structure of one protocol-1 payload (tag included).
// It returns a value-free detail on failure, "" on success.
func checkFrame(data []byte) string {
	r := &reader{b: data}
	tag, ok := r.u8()
	if !ok {
		return "empty payload"
	}
	switch tag {
	case 'B':
		if !r.skip(8 + 8 + 4) {
			return "short begin"
		}
	case 'C':
		flags, ok := r.u8()
		if !ok || !r.skip(8+8+8) {
			return "short commit"
		}
		if flags != 0 {
			return "commit flags set"
		}
	case 'O':
		if !r.skip(8) || !r.cstring() {
			return "short origin"
		}
	case 'Y':
		if !r.skip(4) || !r.cstring() || !r.cstring() {
			return "short type"
		}
	case 'R':
		if !r.skip(4) || !r.cstring() || !r.cstring() {
			return "short relation"
		}
		ident, ok := r.u8()
		if !ok {
			return "short relation"
		}
		switch ident {
		case decode.ReplicaIdentityDefault, decode.ReplicaIdentityNothing, decode.ReplicaIdentityFull, decode.ReplicaIdentityIndex:
		default:
			return "invalid replica identity"
		}
		n, ok := r.u16()
		if !ok {
			return "short relation"
		}
		for range int(n) {
			flags, ok := r.u8()
			if !ok || !r.cstring() || !r.skip(4+4) {
				return "short relation column"
			}
			if flags > 1 {
				return "invalid relation column flags"
			}
		}
	case 'I':
		if !r.skip(4) {
			return "short insert"
		}
		if k, ok := r.u8(); !ok || k != 'N' {
			return "insert without new tuple"
		}
		if _, d := r.tuple(); d != "" {
			return d
		}
	case 'U':
		if !r.skip(4) {
			return "short update"
		}
		k, ok := r.u8()
		if !ok {
			return "short update"
		}
		if k == 'K' || k == 'O' {
			if _, d := r.tuple(); d != "" {
				return d
			}
			if k, ok = r.u8(); !ok {
				return "update without new tuple"
			}
		}
		if k != 'N' {
			return "update without new tuple"
		}
		if _, d := r.tuple(); d != "" {
			return d
		}
	case 'D':
		if !r.skip(4) {
			return "short delete"
		}
		if k, ok := r.u8(); !ok || (k != 'K' && k != 'O') {
			return "delete without old tuple"
		}
		if _, d := r.tuple(); d != "" {
			return d
		}
	case 'T':
		n, ok := r.u32()
		if !ok {
			return "short truncate"
		}
		opts, ok := r.u8()
		if !ok {
			return "short truncate"
		}
		if opts&^3 != 0 {
			return "invalid truncate options"
		}
		if n == 0 {
			return "truncate without relations"
		}
		if uint64(n)*4 != uint64(r.remaining()) {
			return "truncate relation count mismatch"
		}
		r.off = len(r.b)
	case 'M':
		flags, ok := r.u8()
		if !ok {
			return "short message"
		}
		if flags > 1 {
			return "invalid message flags"
		}
		if !r.skip(8) || !r.cstring() {
			return "short message"
		}
		l, ok := r.u32()
		if !ok || uint64(l) != uint64(r.remaining()) {
			return "message content length mismatch"
		}
		r.off = len(r.b)
	default:
		return "unexpected message type"
	}
	if r.remaining() != 0 {
		return "trailing bytes"
	}
	return ""
}
