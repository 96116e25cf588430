package decode

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Class is a bounded failure class. It is safe to persist and to expose in
// metrics; it never carries data.
type Class string

// Failure classes. The set is closed: every error produced by this package and
// by package collate carries one of these.
const (
	// ClassMalformed: the payload does not follow the plugin's wire grammar
	// (short, truncated, trailing bytes, invalid tag or flag values, a tuple
	// whose column count differs from its relation).
	ClassMalformed Class = "decode_malformed"
	// ClassUnknownRelation: a row or truncate event names a relation OID for
	// which no Relation message was seen in this session.
	ClassUnknownRelation Class = "unknown_relation"
	// ClassUnsupportedMessage: a well-known message kind that Synchro does not
	// consume (two-phase commit messages) or an unknown message tag.
	ClassUnsupportedMessage Class = "unsupported_message"
	// ClassStreamingUnsupported: an in-progress streaming message (protocol 2+).
	ClassStreamingUnsupported Class = "streaming_unsupported"
	// ClassMessageFormat: a Synchro logical message (prefix "synchro.") that
	// violates docs/wire-format.md. Returned by the message parsers; package
	// collate drops such a message (anyone can emit one) instead of failing.
	ClassMessageFormat Class = "message_format"
	// ClassCapabilityUnsupported: the decoder cannot express a capability that
	// Synchro requires; refused before streaming starts.
	ClassCapabilityUnsupported Class = "decoder_capability_unsupported"
	// ClassConfigInvalid: a decoder option (such as the publication name) is
	// unusable.
	ClassConfigInvalid Class = "config_invalid"
	// ClassTransactionFraming: Begin/Commit framing is violated (nested Begin,
	// Commit without Begin, a change outside a transaction, a Commit whose LSN
	// differs from its Begin's final LSN). Produced by package collate.
	ClassTransactionFraming Class = "transaction_framing"
	// ClassCommitOrder: commit LSNs did not strictly increase across
	// transactions. Produced by package collate.
	ClassCommitOrder Class = "commit_order"
	// ClassStopped: a collator that has already failed was fed again.
	// Produced by package collate.
	ClassStopped Class = "collator_stopped"
	// ClassTableSetChanged: a registry activation arrived in the stream that
	// the session's table set predates (a plugin that filters tables itself,
	// wal2json's add-tables). Not a failure of the transaction: the session
	// ends before it is materialized and the next one reads the table set
	// again (transient).
	ClassTableSetChanged Class = "table_set_changed"
	// ClassValueNotRepresentable: the plugin cannot carry a registered value
	// exactly (wal2json 2.5: numeric, float4 and float8 as bare JSON numbers,
	// NaN and Infinity as null); refused at session start.
	ClassValueNotRepresentable Class = "value_not_representable"
)

// Classes lists every Class, for exhaustive checks in tests and metrics.
func Classes() []Class {
	return []Class{
		ClassMalformed, ClassUnknownRelation, ClassUnsupportedMessage,
		ClassStreamingUnsupported, ClassMessageFormat, ClassCapabilityUnsupported,
		ClassConfigInvalid, ClassTransactionFraming, ClassCommitOrder, ClassStopped,
		ClassTableSetChanged, ClassValueNotRepresentable,
	}
}

// Error is a decode, message-format or framing failure. All fields are
// value-free: Detail is a fixed string chosen by this module's code, LSN is
// the WAL position of the offending payload, RelationOID a catalog identifier.
type Error struct {
	Class       Class
	Detail      string
	LSN         pglogrepl.LSN // WAL start of the offending payload; 0 if unknown
	RelationOID uint32        // 0 if not applicable
	// CommitLSN is the commit LSN of the source transaction the offending payload
	// belongs to, when the plugin knows it and the runner may not: a plugin that
	// holds a transaction's Begin back until its first change (wal2json) fails
	// that change before the runner saw the Begin. The runner quarantines the
	// transaction by it (0: unknown).
	CommitLSN pglogrepl.LSN
}

func (e *Error) Error() string {
	s := "synchro: " + string(e.Class) + ": " + e.Detail
	if e.LSN != 0 {
		s += " at " + e.LSN.String()
	}
	if e.RelationOID != 0 {
		s += fmt.Sprintf(" (relation oid %d)", e.RelationOID)
	}
	return s
}

// Is reports whether target is an *Error of the same Class, so that
// errors.Is(err, &decode.Error{Class: decode.ClassMalformed}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Class == e.Class
}

// ClassOf returns the Class of the first *Error in err's chain.
func ClassOf(err error) (Class, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Class, true
	}
	return "", false
}

// NewError returns an *Error; for the plugin packages. detail must be a fixed,
// value-free string.
func NewError(class Class, lsn pglogrepl.LSN, detail string) *Error {
	return newErr(class, lsn, detail)
}

func newErr(class Class, lsn pglogrepl.LSN, detail string) *Error {
	return &Error{Class: class, Detail: detail, LSN: lsn}
}
