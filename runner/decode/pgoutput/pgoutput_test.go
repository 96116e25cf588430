package pgoutput_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/pgoutput"
)

// The default decoder sends the replication commands Synchro sent before decoders
// were selectable (v0.1.0: CREATE_REPLICATION_SLOT ... LOGICAL pgoutput EXPORT_SNAPSHOT,
// START_REPLICATION with these three options), and opens no connection for it.
func TestCommandsUnchanged(t *testing.T) {
	p := pgoutput.Plugin{}
	if p.Name() != "pgoutput" {
		t.Fatal(p.Name())
	}
	if got, want := p.SlotOptions(), (pglogrepl.CreateReplicationSlotOptions{
		SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication}); got != want {
		t.Fatalf("slot options %+v", got)
	}
	s, err := p.Open(context.Background(), nil, decode.SessionSpec{Publication: "synchro", RegistryGeneration: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.StartOptions(), []string{"proto_version '1'", `publication_names '"synchro"'`, "messages 'true'"}; !slices.Equal(got, want) {
		t.Fatalf("start options %q", got)
	}
	if _, ok := any(p).(decode.Prober); ok {
		t.Fatal("pgoutput is built in: no probe, no connection")
	}
	if s.Boundary([]byte{'B', 0}) != decode.BoundaryBegin || s.Boundary([]byte{'C', 0}) != decode.BoundaryCommit ||
		s.Boundary([]byte{'I'}) != decode.BoundaryNone || s.Boundary(nil) != decode.BoundaryNone {
		t.Fatal("boundary")
	}
	if err := decode.CheckCapabilities(p, 150000); err != nil {
		t.Fatal(err)
	}
}
