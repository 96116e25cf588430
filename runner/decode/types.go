package decode

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
)

// Message is one neutral decoded message. The concrete types are *Begin,
// *Commit, *Relation, *Row, *Truncate, *LogicalMessage, *Origin and *TypeInfo;
// consumers type-switch. The set is closed (the method is unexported).
type Message interface {
	message()
}

// Begin opens a source transaction.
type Begin struct {
	FinalLSN   pglogrepl.LSN // LSN of the commit record; equals Commit.CommitLSN
	CommitTime time.Time
	Xid        uint32
}

// Commit closes a source transaction.
type Commit struct {
	CommitLSN  pglogrepl.LSN // LSN of the commit record (the replay identity)
	EndLSN     pglogrepl.LSN // end of the commit record (the acknowledgement boundary)
	CommitTime time.Time
}

// Column describes one published column of a relation.
type Column struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	Key     bool // part of the replica identity
}

// Replica identity settings as reported by pgoutput (pg_class.relreplident).
const (
	ReplicaIdentityDefault byte = 'd'
	ReplicaIdentityNothing byte = 'n'
	ReplicaIdentityFull    byte = 'f'
	ReplicaIdentityIndex   byte = 'i'
)

// Relation is a relation's published shape. A Relation is immutable once
// decoded: a later Relation message for the same OID replaces the cached
// pointer, and events decoded earlier keep pointing at the shape they were
// decoded with. Consumers must not modify it.
type Relation struct {
	OID             uint32
	Namespace       string
	Name            string
	ReplicaIdentity byte // one of the ReplicaIdentity* constants
	Columns         []Column
}

// Op is a row operation.
type Op uint8

// Row operations.
const (
	OpInsert Op = iota + 1
	OpUpdate
	OpDelete
)

func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	}
	return "invalid"
}

// ValueKind says how one column value travelled.
type ValueKind uint8

// Column value kinds (pgoutput 'n', 't', 'u', 'b').
const (
	ValueNull ValueKind = iota + 1
	ValueText
	ValueUnchangedToast // an unchanged TOASTed value; the data is not sent
	ValueBinary
)

func (k ValueKind) String() string {
	switch k {
	case ValueNull:
		return "null"
	case ValueText:
		return "text"
	case ValueUnchangedToast:
		return "unchanged_toast"
	case ValueBinary:
		return "binary"
	}
	return "invalid"
}

// Value is one column value. Data is nil unless Kind is ValueText or
// ValueBinary. Data is owned by the Value (never aliases the payload).
type Value struct {
	Kind ValueKind
	Data []byte
}

// String redacts the data.
func (v Value) String() string { return fmt.Sprintf("%s(%d bytes)", v.Kind, len(v.Data)) }

// LogValue redacts the data.
func (v Value) LogValue() slog.Value { return slog.StringValue(v.String()) }

// TupleKind says which tuple image a Tuple is.
type TupleKind uint8

// Tuple images (pgoutput 'N', 'K', 'O').
const (
	TupleNew TupleKind = 'N' // the new row image
	TupleKey TupleKind = 'K' // key-only old image: replica-identity columns set, the rest null
	TupleOld TupleKind = 'O' // full old image (REPLICA IDENTITY FULL)
)

// Tuple is one row image. Values is aligned with the relation's Columns.
type Tuple struct {
	Kind   TupleKind
	Values []Value
}

// String redacts the values.
func (t *Tuple) String() string {
	if t == nil {
		return "<nil tuple>"
	}
	return fmt.Sprintf("tuple(%c, %d columns)", byte(t.Kind), len(t.Values))
}

// LogValue redacts the values.
func (t *Tuple) LogValue() slog.Value { return slog.StringValue(t.String()) }

// Row is an insert, update or delete.
//
// Insert: Old nil, New set. Update: New set; Old is nil when the server sent
// no old image (REPLICA IDENTITY DEFAULT without a key change), a TupleKey
// image when the key changed or a key column is stored out of line (New then
// has that column as unchanged TOAST when it did not change), a TupleOld image
// under REPLICA IDENTITY FULL.
// Delete: New nil, Old is a TupleKey or TupleOld image.
type Row struct {
	Op       Op
	Relation *Relation // the cached relation at the time of the event
	Old      *Tuple
	New      *Tuple
}

// Truncate is a TRUNCATE of one or more relations.
type Truncate struct {
	Relations       []*Relation
	Cascade         bool
	RestartIdentity bool
}

// LogicalMessage is a pg_logical_emit_message message.
type LogicalMessage struct {
	Transactional bool
	LSN           pglogrepl.LSN
	Prefix        string
	Content       []byte // owned copy
}

// Origin names the replication origin of the current transaction.
type Origin struct {
	CommitLSN pglogrepl.LSN
	Name      string
}

// TypeInfo describes a non-built-in data type used by a following Relation.
type TypeInfo struct {
	OID       uint32
	Namespace string
	Name      string
}

func (*Begin) message()          {}
func (*Commit) message()         {}
func (*Relation) message()       {}
func (*Row) message()            {}
func (*Truncate) message()       {}
func (*LogicalMessage) message() {}
func (*Origin) message()         {}
func (*TypeInfo) message()       {}
