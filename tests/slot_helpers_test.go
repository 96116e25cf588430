package tests

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/tests/testdb"
)

// createSlot makes a pgoutput slot named after the test database (testdb drops it
// before the database goes) and returns its name.
func createSlot(t *testing.T, db *testdb.DB) string {
	t.Helper()
	slot := db.Name
	_, err := db.Pool.Exec(context.Background(),
		`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	require.NoError(t, err)
	return slot
}

// decoded is one pgoutput message peeked from a slot, in decoded order.
type decoded struct {
	msg pglogrepl.Message
	rel *pglogrepl.RelationMessage // for row messages: the relation it belongs to
}

// peek reads every pending change of the slot (without consuming it) through pgoutput
// protocol 1 with messages on, parsed by pglogrepl.
func peek(t *testing.T, db *testdb.DB, slot string) []decoded {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		   'proto_version', '1', 'publication_names', 'synchro', 'messages', 'true')`, slot)
	require.NoError(t, err)
	defer rows.Close()
	rels := map[uint32]*pglogrepl.RelationMessage{}
	var out []decoded
	for rows.Next() {
		var data []byte
		require.NoError(t, rows.Scan(&data))
		m, err := pglogrepl.Parse(data)
		require.NoError(t, err)
		d := decoded{msg: m}
		switch r := m.(type) {
		case *pglogrepl.RelationMessage:
			rels[r.RelationID] = r
		case *pglogrepl.InsertMessage:
			d.rel = rels[r.RelationID]
		case *pglogrepl.UpdateMessage:
			d.rel = rels[r.RelationID]
		case *pglogrepl.DeleteMessage:
			d.rel = rels[r.RelationID]
		}
		out = append(out, d)
	}
	require.NoError(t, rows.Err())
	return out
}

// fenceMsg is a synchro.fence message (docs/wire-format.md) in the fields of wire
// format 2; fences parses the compact format 3 the triggers write into it.
type fenceMsg struct {
	V          int             `json:"v"`
	Kind       string          `json:"kind"`
	RelationID int64           `json:"relation_id"`
	Schema     string          `json:"schema"`
	Table      string          `json:"table"`
	Op         string          `json:"op"`
	OldKey     *string         `json:"old_key"`
	NewKey     *string         `json:"new_key"`
	Version    string          `json:"version"`
	FenceID    string          `json:"fence_id"`
	Ordinal    int64           `json:"ordinal"`
	TableID    *string         `json:"table_id"`
	PK         json.RawMessage `json:"pk"`
	CaptureKey *string         `json:"capture_key"`
	MAC        string          `json:"mac"`
	Signed     string          `json:"-"` // format 3: the text the MAC covers
}

// event is a simplified view of the decoded stream: "B", "C", "I:table", "U:table",
// "D:table", "T", "M:prefix".
func events(ds []decoded) []string {
	var out []string
	for _, d := range ds {
		switch m := d.msg.(type) {
		case *pglogrepl.BeginMessage:
			out = append(out, "B")
		case *pglogrepl.CommitMessage:
			out = append(out, "C")
		case *pglogrepl.InsertMessage:
			out = append(out, "I:"+d.rel.RelationName)
		case *pglogrepl.UpdateMessage:
			out = append(out, "U:"+d.rel.RelationName)
		case *pglogrepl.DeleteMessage:
			out = append(out, "D:"+d.rel.RelationName)
		case *pglogrepl.TruncateMessage:
			out = append(out, "T")
		case *pglogrepl.LogicalDecodingMessage:
			out = append(out, "M:"+m.Prefix)
		}
	}
	return out
}

// fences returns the fence messages of the stream, in decoded order.
func fences(t *testing.T, ds []decoded) []fenceMsg {
	t.Helper()
	var out []fenceMsg
	for _, d := range ds {
		if m, ok := d.msg.(*pglogrepl.LogicalDecodingMessage); ok && m.Prefix == "synchro.fence" {
			require.True(t, m.Transactional)
			require.True(t, strings.HasPrefix(string(m.Content), "1:3"), "fences are written in wire format 3")
			p, err := decode.ParseFence(m.Content)
			require.NoError(t, err)
			f := fenceMsg{V: p.Format, Kind: string(p.Kind), RelationID: p.RelationID, Schema: p.Schema,
				Table: p.Table, Op: string(p.Op), OldKey: p.OldKey, NewKey: p.NewKey, Version: p.Version,
				FenceID: p.FenceID, Ordinal: p.Ordinal, MAC: p.MAC, Signed: p.Signed}
			if p.Kind == decode.FenceSynced {
				f.TableID = &p.TableID
				if p.PK.IsInt {
					f.PK = json.RawMessage(strconv.FormatInt(p.PK.Int, 10))
				} else {
					f.PK, err = json.Marshal(p.PK.Str)
					require.NoError(t, err)
				}
			} else {
				f.CaptureKey = &p.CaptureKey
			}
			out = append(out, f)
		}
	}
	return out
}

// requireSQLState fails unless err is a PostgreSQL error with the given SQLSTATE.
func requireSQLState(t *testing.T, err error, code string) *pgconn.PgError {
	t.Helper()
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "not a PostgreSQL error: %v", err)
	require.Equal(t, code, pgErr.Code, "message: %s", pgErr.Message)
	return pgErr
}

// mustExec runs statements that must succeed.
func mustExec(t *testing.T, db *testdb.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// asMessage returns d as a logical decoding message, if it is one.
func asMessage(d decoded) (*pglogrepl.LogicalDecodingMessage, bool) {
	m, ok := d.msg.(*pglogrepl.LogicalDecodingMessage)
	return m, ok
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
