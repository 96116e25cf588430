// Package pglogical declares the pglogical output plugin (pglogical_output,
// Debian's postgresql-15-pglogical) to the runner so that choosing it is
// refused at start by capability, with the capability it lacks named, before
// any slot is created: its output plugin has no message callback, so it cannot
// carry the transactional logical messages Synchro's fences and registry
// activations travel in, and it emits no TRUNCATE. No payload of it is ever
// decoded.
package pglogical

import (
	"context"

	"github.com/jackc/pglogrepl"

	"github.com/synchro/synchro/runner/decode"
)

// Name is the output plugin name.
const Name = "pglogical_output"

// Plugin is pglogical_output, as declared by its capabilities.
type Plugin struct{}

var _ decode.Plugin = Plugin{}

// Name returns "pglogical_output".
func (Plugin) Name() string { return Name }

// Capabilities: pglogical 2.x's output plugin registers no message_cb and no
// truncate_cb (pglogical_output_plugin.c); it carries commit LSNs.
func (Plugin) Capabilities() decode.Capabilities {
	return decode.Capabilities{TransactionalMessages: false, Truncate: false, CommitLSN: true, MinServerVersionNum: 90400}
}

func refused() error {
	return decode.NewError(decode.ClassCapabilityUnsupported, 0,
		"decoder pglogical_output cannot deliver transactional logical messages (fences, registry activations)")
}

// SlotOptions are never used: Probe and the capability check refuse first.
func (Plugin) SlotOptions() pglogrepl.CreateReplicationSlotOptions {
	return pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication}
}

// Open refuses.
func (Plugin) Open(context.Context, decode.Querier, decode.SessionSpec) (decode.Session, error) {
	return nil, refused()
}
