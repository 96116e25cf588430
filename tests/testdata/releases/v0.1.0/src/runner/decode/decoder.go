package decode

import (
	"strings"

	"github.com/jackc/pglogrepl"
)

// Decoder turns one output plugin's XLogData payloads into neutral Messages.
// Implementations hold per-session state and are not safe for concurrent use.
type Decoder interface {
	// Decode decodes one XLogData payload whose WAL start is walStart. The
	// returned messages are in payload order. Any failure is an *Error.
	Decode(walStart pglogrepl.LSN, data []byte) ([]Message, error)
	// Plugin is the output plugin name for CREATE_REPLICATION_SLOT.
	Plugin() string
	// StartOptions returns the START_REPLICATION plugin options, each of the
	// form `name 'value'`, ready for pglogrepl.StartReplicationOptions.PluginArgs.
	StartOptions(publication string) ([]string, error)
	// Capabilities reports what the plugin, as configured by StartOptions,
	// can express.
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
	// CommitLSN: the commit record LSN and end LSN are carried by the stream
	// (never fabricated).
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
func CheckCapabilities(d Decoder, serverVersionNum int) error {
	c := d.Capabilities()
	switch {
	case !c.TransactionalMessages:
		return newErr(ClassCapabilityUnsupported, 0, "decoder cannot deliver transactional logical messages")
	case !c.Truncate:
		return newErr(ClassCapabilityUnsupported, 0, "decoder cannot deliver truncate")
	case !c.CommitLSN:
		return newErr(ClassCapabilityUnsupported, 0, "decoder does not carry the commit lsn")
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
