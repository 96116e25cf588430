// Package pgoutput is the pgoutput output plugin behind decode.Plugin: protocol
// version 1 with messages 'true', the publication the registry keeps, and
// Decoder (with its structural frame check, frame.go) for the payloads. Its slot
// and START_REPLICATION commands are the ones Synchro has always sent.
package pgoutput

import (
	"context"

	"github.com/jackc/pglogrepl"

	"github.com/synchro/synchro/runner/decode"
)

// Name is the output plugin name.
const Name = "pgoutput"

// Plugin is pgoutput. The zero value is ready to use.
type Plugin struct{}

var _ decode.Plugin = Plugin{}

// Name returns "pgoutput".
func (Plugin) Name() string { return Name }

// Capabilities: protocol 1 with messages (PostgreSQL 14 and later).
func (Plugin) Capabilities() decode.Capabilities { return NewDecoder().Capabilities() }

// SlotOptions: a logical slot with an exported snapshot.
func (Plugin) SlotOptions() pglogrepl.CreateReplicationSlotOptions {
	return pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication}
}

// Open returns a session reading spec.Publication.
func (Plugin) Open(_ context.Context, _ decode.Querier, spec decode.SessionSpec) (decode.Session, error) {
	d := NewDecoder()
	opts, err := d.StartOptions(spec.Publication)
	if err != nil {
		return nil, err
	}
	return &session{Decoder: d, opts: opts}, nil
}

type session struct {
	*Decoder
	opts []string
}

func (s *session) StartOptions() []string { return s.opts }

// Boundary reads the message tag: 'B' begin, 'C' commit.
func (*session) Boundary(data []byte) decode.Boundary {
	if len(data) > 0 {
		switch data[0] {
		case 'B':
			return decode.BoundaryBegin
		case 'C':
			return decode.BoundaryCommit
		}
	}
	return decode.BoundaryNone
}
