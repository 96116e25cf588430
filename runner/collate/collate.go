// Package collate assembles whole source transactions from a decoded message
// stream and hands them to a [Sink] as a stream: Begin, then one Event per
// change in decoded source order, then Commit. Nothing of a transaction is
// buffered here, so a transaction of any size flows through in O(1) memory;
// a sink that needs the whole transaction (fence reconciliation) buffers what
// it needs itself.
//
// # Ordinals
//
// Event.Ordinal is the ADR's event_ordinal for row-change events: row events
// (insert, update, delete) and truncates share one zero-based sequence per
// source transaction, assigned in decoded source order before any filtering.
// A truncate consumes an ordinal because it is a change event with its own
// replay identity (it blocks capture when it names a registered relation).
//
// Logical messages do not consume an ordinal. A message Event carries, in
// Ordinal, the number of row-change events decoded before it in the same
// transaction, i.e. the ordinal the next row-change event will receive. So a
// row event precedes a registry activation message exactly when
// row.Ordinal < activation.Ordinal. Several messages may share one Ordinal;
// their relative order is the order of Event calls.
//
// # Framing
//
// Begin must arrive outside a transaction; row events, truncates and
// transactional logical messages inside one; Commit closes it, and its
// CommitLSN must equal the Begin's FinalLSN. Commit LSNs strictly increase
// across transactions. Relation, Type and Origin messages produce no Event.
//
// # Messages nobody trusts
//
// Any role may emit a logical message with any prefix (pg_logical_emit_message
// is executable by PUBLIC), so a "synchro." prefix proves nothing and a message
// never stops the stream. Non-transactional messages produce no Event (Synchro
// emits only transactional ones). Transactional messages with a Synchro prefix
// are parsed ([decode.ParseFence], [decode.ParseRegistryActivation]); one with
// an unknown "synchro." prefix or a content that does not parse is dropped.
// Each dropped "synchro." message is reported to a Sink that implements
// [IgnoreSink]. Whether a message that parses is authentic (its MAC) is decided
// by materialization, which holds the key.
//
// Every failure is a value-free *decode.Error. After any error, including a
// sink error, the Collator is stopped: it never resumes mid-transaction.
// Build a new Collator (and a new decoder) for the next replication session.
package collate

import (
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/synchro/synchro/runner/decode"
)

// TxnHeader opens a source transaction.
type TxnHeader struct {
	CommitLSN  pglogrepl.LSN // the Begin's FinalLSN: the transaction's replay identity
	CommitTime time.Time
	Xid        uint32
}

// TxnTrailer closes a source transaction.
type TxnTrailer struct {
	CommitLSN  pglogrepl.LSN
	EndLSN     pglogrepl.LSN // acknowledgement boundary after this transaction
	CommitTime time.Time
	RowEvents  uint64 // row-change events (rows and truncates) in the transaction
	Messages   uint64 // transactional logical messages in the transaction
}

// EventKind says which field of an Event is set.
type EventKind uint8

// Event kinds.
const (
	KindRow EventKind = iota + 1
	KindTruncate
	KindMessage
)

// Event is one change of the open transaction.
type Event struct {
	Kind EventKind
	// Ordinal: for KindRow and KindTruncate, the zero-based event ordinal;
	// for KindMessage, the number of row-change events before it (see the
	// package documentation).
	Ordinal  uint64
	Row      *decode.Row      // KindRow
	Truncate *decode.Truncate // KindTruncate
	Message  *decode.LogicalMessage
	// Fence is set for a synchro.fence message, Activation for a
	// synchro.registry message; both nil for other prefixes.
	Fence      *decode.Fence
	Activation *decode.Activation
}

// IgnoreReason says why a "synchro." message was dropped. Bounded: safe as a
// metric label.
type IgnoreReason string

// Reasons for dropping a "synchro." message.
const (
	IgnoreNonTransactional IgnoreReason = "non_transactional"
	IgnoreUnknownPrefix    IgnoreReason = "unknown_prefix"
	IgnoreMalformed        IgnoreReason = "malformed"
)

// IgnoreSink is implemented by a Sink that wants to count dropped "synchro."
// messages.
type IgnoreSink interface {
	Ignored(reason IgnoreReason)
}

// Sink receives assembled transactions. A non-nil error stops the Collator
// and is returned from Feed unchanged.
type Sink interface {
	Begin(ctx context.Context, h TxnHeader) error
	Event(ctx context.Context, e Event) error
	Commit(ctx context.Context, t TxnTrailer) error
}

// Collator validates framing and streams transactions to a Sink. Not safe
// for concurrent use.
type Collator struct {
	sink Sink

	inTxn     bool
	cur       TxnHeader
	rowEvents uint64
	messages  uint64

	haveLast  bool
	lastCommt pglogrepl.LSN
	lastEnd   pglogrepl.LSN

	err error
}

// New returns a Collator feeding sink.
func New(sink Sink) *Collator {
	return &Collator{sink: sink}
}

// InTransaction reports whether a Begin has been fed without its Commit.
func (c *Collator) InTransaction() bool { return c.inTxn }

// LastCommit returns the CommitLSN and EndLSN of the last transaction whose
// Commit the sink accepted; ok is false before the first.
func (c *Collator) LastCommit() (commitLSN, endLSN pglogrepl.LSN, ok bool) {
	return c.lastCommt, c.lastEnd, c.haveLast
}

// Err returns the error that stopped the Collator, or nil.
func (c *Collator) Err() error { return c.err }

// Feed processes the messages decoded from one payload at walStart.
func (c *Collator) Feed(ctx context.Context, walStart pglogrepl.LSN, msgs []decode.Message) error {
	if c.err != nil {
		return &decode.Error{Class: decode.ClassStopped, Detail: "collator stopped by an earlier error", LSN: walStart}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, m := range msgs {
		if err := c.one(ctx, walStart, m); err != nil {
			c.err = err
			return err
		}
	}
	return nil
}

func framing(lsn pglogrepl.LSN, detail string) error {
	return &decode.Error{Class: decode.ClassTransactionFraming, Detail: detail, LSN: lsn}
}

func (c *Collator) one(ctx context.Context, walStart pglogrepl.LSN, m decode.Message) error {
	switch m := m.(type) {
	case *decode.Begin:
		if c.inTxn {
			return framing(walStart, "begin inside an open transaction")
		}
		if c.haveLast && m.FinalLSN <= c.lastCommt {
			return &decode.Error{Class: decode.ClassCommitOrder, Detail: "commit lsn does not increase", LSN: walStart}
		}
		h := TxnHeader{CommitLSN: m.FinalLSN, CommitTime: m.CommitTime, Xid: m.Xid}
		c.inTxn, c.cur, c.rowEvents, c.messages = true, h, 0, 0
		return c.sink.Begin(ctx, h)
	case *decode.Commit:
		if !c.inTxn {
			return framing(walStart, "commit without begin")
		}
		if m.CommitLSN != c.cur.CommitLSN {
			return framing(walStart, "commit lsn differs from begin final lsn")
		}
		if m.EndLSN <= m.CommitLSN {
			return framing(walStart, "commit end lsn not after commit lsn")
		}
		t := TxnTrailer{
			CommitLSN: m.CommitLSN, EndLSN: m.EndLSN, CommitTime: m.CommitTime,
			RowEvents: c.rowEvents, Messages: c.messages,
		}
		if err := c.sink.Commit(ctx, t); err != nil {
			return err
		}
		c.inTxn = false
		c.haveLast, c.lastCommt, c.lastEnd = true, m.CommitLSN, m.EndLSN
		return nil
	case *decode.Row:
		if !c.inTxn {
			return framing(walStart, "row event outside a transaction")
		}
		e := Event{Kind: KindRow, Ordinal: c.rowEvents, Row: m}
		c.rowEvents++
		return c.sink.Event(ctx, e)
	case *decode.Truncate:
		if !c.inTxn {
			return framing(walStart, "truncate outside a transaction")
		}
		e := Event{Kind: KindTruncate, Ordinal: c.rowEvents, Truncate: m}
		c.rowEvents++
		return c.sink.Event(ctx, e)
	case *decode.LogicalMessage:
		return c.message(ctx, walStart, m)
	case *decode.Relation, *decode.TypeInfo, *decode.Origin:
		return nil
	case nil:
		return framing(walStart, "nil message")
	}
	return &decode.Error{Class: decode.ClassUnsupportedMessage, Detail: "unknown decoded message kind", LSN: walStart}
}

func (c *Collator) message(ctx context.Context, walStart pglogrepl.LSN, m *decode.LogicalMessage) error {
	synchro := strings.HasPrefix(m.Prefix, decode.PrefixNamespace)
	if !m.Transactional {
		// Never the pack's (it emits transactional messages only), and never
		// blocking: it belongs to no transaction that could be retried.
		if synchro {
			c.ignore(IgnoreNonTransactional)
		}
		return nil
	}
	if !c.inTxn {
		return framing(walStart, "transactional message outside a transaction")
	}
	if synchro {
		// wal2json prints a message's content as a C string, cut at its first NUL;
		// pgoutput passes every byte. The pack's messages hold no NUL, so a
		// synchro.-prefixed one with a NUL is a stranger's: cut the same way here, so
		// both decoders hand the same bytes on and drop it for the same reason
		// (TestDecoderTxnEdgeNulTruncatedFenceDifferential: pgoutput counted it malformed,
		// wal2json unauthenticated).
		if i := bytes.IndexByte(m.Content, 0); i >= 0 {
			m.Content = m.Content[:i]
		}
	}
	e := Event{Kind: KindMessage, Ordinal: c.rowEvents, Message: m}
	if synchro && len(m.Content) > decode.MaxMessageContent {
		c.ignore(IgnoreMalformed) // not the pack's: never parsed, never staged
		return nil
	}
	if synchro {
		switch m.Prefix {
		// The pack's own messages always parse: one that does not is someone
		// else's, and is dropped like an unknown prefix.
		case decode.PrefixFence:
			f, err := decode.ParseFence(m.Content)
			if err != nil {
				c.ignore(IgnoreMalformed)
				return nil
			}
			e.Fence = &f
		case decode.PrefixRegistry:
			a, err := decode.ParseRegistryActivation(m.Content)
			if err != nil {
				c.ignore(IgnoreMalformed)
				return nil
			}
			e.Activation = &a
		default:
			c.ignore(IgnoreUnknownPrefix)
			return nil
		}
	}
	c.messages++
	return c.sink.Event(ctx, e)
}

func (c *Collator) ignore(r IgnoreReason) {
	if s, ok := c.sink.(IgnoreSink); ok {
		s.Ignored(r)
	}
}
