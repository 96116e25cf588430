// Package pgtest builds pgoutput protocol-version-1 payloads for tests. It is
// a test helper: it performs no validation and will happily build malformed
// payloads when asked to.
package pgtest

import (
	"encoding/binary"
	"time"
)

// Col is one relation column.
type Col struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	Key     bool
}

// Val is one tuple column: Kind 'n' (null), 'u' (unchanged TOAST), 't'
// (text) or 'b' (binary) with Data for 't' and 'b'.
type Val struct {
	Kind byte
	Data []byte
}

// Null, Toast, Text and Bin build tuple columns.
func Null() Val            { return Val{Kind: 'n'} }
func Toast() Val           { return Val{Kind: 'u'} }
func Text(s string) Val    { return Val{Kind: 't', Data: []byte(s)} }
func Bin(b []byte) Val     { return Val{Kind: 'b', Data: b} }
func Tuple(v ...Val) []Val { return v }

// pgEpoch is 2000-01-01 UTC, the origin of pgoutput timestamps.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

type buf []byte

func (b buf) u8(v byte) buf    { return append(b, v) }
func (b buf) u16(v uint16) buf { return binary.BigEndian.AppendUint16(b, v) }
func (b buf) u32(v uint32) buf { return binary.BigEndian.AppendUint32(b, v) }
func (b buf) u64(v uint64) buf { return binary.BigEndian.AppendUint64(b, v) }
func (b buf) str(s string) buf { return append(append(b, s...), 0) }
func (b buf) ts(t time.Time) buf {
	return b.u64(uint64(t.Sub(pgEpoch).Microseconds()))
}

func (b buf) tuple(vals []Val) buf {
	b = b.u16(uint16(len(vals)))
	for _, v := range vals {
		b = b.u8(v.Kind)
		if v.Kind == 't' || v.Kind == 'b' {
			b = b.u32(uint32(len(v.Data)))
			b = append(b, v.Data...)
		}
	}
	return b
}

// Begin builds 'B'.
func Begin(finalLSN uint64, commitTime time.Time, xid uint32) []byte {
	return buf{'B'}.u64(finalLSN).ts(commitTime).u32(xid)
}

// Commit builds 'C' with flags 0.
func Commit(commitLSN, endLSN uint64, commitTime time.Time) []byte {
	return buf{'C'}.u8(0).u64(commitLSN).u64(endLSN).ts(commitTime)
}

// Relation builds 'R'. ident is the replica identity byte ('d', 'n', 'f', 'i').
func Relation(oid uint32, namespace, name string, ident byte, cols ...Col) []byte {
	b := buf{'R'}.u32(oid).str(namespace).str(name).u8(ident).u16(uint16(len(cols)))
	for _, c := range cols {
		var flags byte
		if c.Key {
			flags = 1
		}
		b = b.u8(flags).str(c.Name).u32(c.TypeOID).u32(uint32(c.TypeMod))
	}
	return b
}

// Type builds 'Y'.
func Type(oid uint32, namespace, name string) []byte {
	return buf{'Y'}.u32(oid).str(namespace).str(name)
}

// Origin builds 'O'.
func Origin(commitLSN uint64, name string) []byte {
	return buf{'O'}.u64(commitLSN).str(name)
}

// Insert builds 'I' with an 'N' tuple.
func Insert(oid uint32, newTuple []Val) []byte {
	return buf{'I'}.u32(oid).u8('N').tuple(newTuple)
}

// Update builds 'U'. oldKind is 0 (no old tuple), 'K' or 'O'.
func Update(oid uint32, oldKind byte, oldTuple, newTuple []Val) []byte {
	b := buf{'U'}.u32(oid)
	if oldKind != 0 {
		b = b.u8(oldKind).tuple(oldTuple)
	}
	return b.u8('N').tuple(newTuple)
}

// Delete builds 'D'. oldKind is 'K' or 'O'.
func Delete(oid uint32, oldKind byte, oldTuple []Val) []byte {
	return buf{'D'}.u32(oid).u8(oldKind).tuple(oldTuple)
}

// Truncate builds 'T'. Option bits: 1 cascade, 2 restart identity.
func Truncate(options byte, oids ...uint32) []byte {
	b := buf{'T'}.u32(uint32(len(oids))).u8(options)
	for _, o := range oids {
		b = b.u32(o)
	}
	return b
}

// Message builds 'M'.
func Message(transactional bool, lsn uint64, prefix string, content []byte) []byte {
	var flags byte
	if transactional {
		flags = 1
	}
	return append(buf{'M'}.u8(flags).u64(lsn).str(prefix).u32(uint32(len(content))), content...)
}
