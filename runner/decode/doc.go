// Package decode turns logical-decoding output-plugin payloads into Synchro's
// neutral change-stream messages, and parses Synchro's own logical messages
// (docs/wire-format.md).
//
// # Decoder interface
//
// A [Decoder] consumes one XLogData payload at a time (the WAL data of one
// CopyData frame, without the 'w' header) and returns the neutral [Message]
// values it carries, in order. pgoutput carries exactly one message per
// payload; the slice result leaves room for plugins that do not. A Decoder
// owns per-session state (pgoutput's relation cache), so one Decoder serves
// exactly one START_REPLICATION session: after a reconnect, build a new one
// (the server re-sends every Relation message on a new session).
//
// Each output plugin is a [Plugin] in a package of its own, which holds
// everything of its wire format: runner/decode/pgoutput (protocol version 1
// with messages 'true', no streaming), runner/decode/wal2json (format 2) and
// runner/decode/pglogical (declared only, to be refused). This package holds
// the interface, the neutral messages and Synchro's own message formats, so
// the collator, the stager and materialization depend on no plugin's format.
// Capabilities a plugin cannot express are refused before streaming starts
// ([CheckCapabilities]), never degraded at run time.
//
// # Value-free errors
//
// Every failure is an [*Error] with a bounded [Class] and a fixed, value-free
// detail drawn from this package's own constants. Error text never contains
// row values, message contents, key text, or raw payload bytes, so it is safe
// to persist in a redacted poison-quarantine record. Malformed input of any
// shape is reported as an error; the decoder never panics.
//
// [Value], [Tuple] and [Fence] implement fmt.Stringer and slog.LogValuer with
// redacted output so that an accidental log call does not leak row data.
package decode
