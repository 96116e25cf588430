package decode

import (
	"context"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Decoder turns one output plugin's XLogData payloads into neutral Messages.
// Implementations hold per-session state and are not safe for concurrent use.
type Decoder interface {
	// Decode decodes one XLogData payload whose WAL start is walStart. The
	// returned messages are in payload order. Any failure is an *Error.
	Decode(walStart pglogrepl.LSN, data []byte) ([]Message, error)
}

// Boundary says whether a payload opens or closes a source transaction on the
// wire, for the replication reader (which must know whether it is inside one
// without decoding the payload).
type Boundary uint8

// Payload boundaries.
const (
	BoundaryNone   Boundary = iota // inside or outside a transaction, neither opening nor closing one
	BoundaryBegin                  // the plugin's begin of a transaction
	BoundaryCommit                 // the plugin's commit of a transaction
)

// Session is one replication session of a Plugin: its START_REPLICATION
// options, and the decoder of that session's payloads. A new session (a
// reconnect) needs a new Session: the plugin's per-session state starts over.
type Session interface {
	Decoder
	// StartOptions are the START_REPLICATION plugin options, each of the form
	// `name 'value'`, ready for pglogrepl.StartReplicationOptions.PluginArgs.
	StartOptions() []string
	// Boundary classifies one payload without decoding it. It must be cheap:
	// the reader calls it for every payload.
	Boundary(data []byte) Boundary
}

// SessionSpec is what a Plugin needs to open a Session.
type SessionSpec struct {
	// Publication is the publication the registry keeps (pgoutput reads it).
	Publication string
	// RegistryGeneration is the registry generation in effect at the session's
	// start position (durable progress), for plugins that filter the table set
	// by generation themselves.
	RegistryGeneration int64
	// RestartedAt is the WAL start of a registry activation that already ended
	// a session of this runner because the plugin's table set was stale (see
	// ClassTableSetChanged); 0 if none. A plugin must not end a session for the
	// same activation twice.
	RestartedAt pglogrepl.LSN
	// Authentic reports whether a registry activation message is the pack's own
	// (its MAC is the server key's: runner/msgauth). A plugin that follows
	// activations itself (its table set, the generation in effect) acts only on
	// authentic ones: anyone may emit a message with that prefix, and a forged
	// one must never end a session or change what the plugin decodes. Nil
	// trusts none.
	Authentic func(*Activation) bool
}

// Plugin is one logical-decoding output plugin: everything plugin-specific the
// runner does goes through it (slot creation, START_REPLICATION options,
// table-set discovery, payload decoding, capabilities), so the collator, the
// stager and everything after them never see the plugin's wire format.
type Plugin interface {
	// Name is the output plugin name (CREATE_REPLICATION_SLOT, and what the
	// stream records).
	Name() string
	// Capabilities reports what the plugin, as the runner configures it, can
	// express. CheckCapabilities refuses a plugin that lacks what Synchro needs.
	Capabilities() Capabilities
	// SlotOptions are the CREATE_REPLICATION_SLOT options: the slot is created
	// with an exported snapshot, the baseline's boundary.
	SlotOptions() pglogrepl.CreateReplicationSlotOptions
	// Open prepares one replication session on db: it reads what the plugin
	// needs (the table set) and returns the session.
	Open(ctx context.Context, db Querier, spec SessionSpec) (Session, error)
}

// Prober is implemented by a Plugin that checks the server before any slot is
// created: that the server's build of the plugin accepts the options the
// runner will send, and that the registered columns are ones it can carry. A
// refusal is an *Error (decoder_capability_unsupported,
// value_not_representable). A plugin without it (pgoutput, built into the
// server) needs no check and no connection for it.
type Prober interface {
	Probe(ctx context.Context, db Querier) error
}

// Querier is a database connection of the runner (a *pgx.Conn or a pgx.Tx).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreateSlot creates the permanent logical slot name of plugin p on the
// replication connection conn, with p's slot options (an exported snapshot).
func CreateSlot(ctx context.Context, conn *pgconn.PgConn, p Plugin, name string) (pglogrepl.CreateReplicationSlotResult, error) {
	return pglogrepl.CreateReplicationSlot(ctx, conn, name, p.Name(), p.SlotOptions())
}

// CapabilityReporter is anything that reports Capabilities (a Plugin).
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// Capabilities is what a decoder can express on the wire.
type Capabilities struct {
	// TransactionalMessages: transactional pg_logical_emit_message messages are
	// delivered in source order between Begin and Commit. Synchro's fences and
	// registry activations need it.
	TransactionalMessages bool
	// Truncate: TRUNCATE is delivered. Synchro must see a truncate to block on
	// it; a plugin that drops truncates silently cannot be used.
	Truncate bool
	// CommitLSN: the commit record LSN and end LSN of every transaction, and
	// the LSN of every change, are carried by the stream (never fabricated).
	CommitLSN bool
	// Streaming: in-progress transactions may be streamed before commit.
	// Synchro requires it to be false.
	Streaming bool
	// MinServerVersionNum is the lowest server_version_num on which the
	// decoder's options are accepted.
	MinServerVersionNum int
}

// CheckCapabilities refuses a decoder that cannot express what Synchro needs,
// or a server older than the decoder supports (serverVersionNum is
// server_version_num; 0 skips the version check). It is a start-time check:
// capabilities are refused, never degraded at run time.
func CheckCapabilities(d CapabilityReporter, serverVersionNum int) error {
	c := d.Capabilities()
	switch {
	case !c.TransactionalMessages:
		return newErr(ClassCapabilityUnsupported, 0, "decoder cannot deliver transactional logical messages (fences, registry activations)")
	case !c.Truncate:
		return newErr(ClassCapabilityUnsupported, 0, "decoder cannot deliver truncate")
	case !c.CommitLSN:
		return newErr(ClassCapabilityUnsupported, 0, "decoder does not carry the commit lsn of each transaction and the lsn of each change")
	case c.Streaming:
		return newErr(ClassCapabilityUnsupported, 0, "decoder streams in-progress transactions")
	case serverVersionNum != 0 && serverVersionNum < c.MinServerVersionNum:
		return newErr(ClassCapabilityUnsupported, 0, "server version too old for decoder")
	}
	return nil
}

// quoteOptionValue renders s as a replication-protocol string literal.
func quoteOptionValue(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// quoteIdent renders s as a double-quoted identifier, so that the plugin's
// identifier-list parsing keeps case, commas and spaces verbatim.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// QuoteOptionValue renders s as a replication-protocol string literal (for
// plugin packages' START_REPLICATION options).
func QuoteOptionValue(s string) string { return quoteOptionValue(s) }

// QuoteIdent renders s as a double-quoted identifier (for plugin packages'
// START_REPLICATION options).
func QuoteIdent(s string) string { return quoteIdent(s) }
