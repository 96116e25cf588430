package pgoutput

import (
	"github.com/synchro/synchro/runner/decode"
	"strings"

	"github.com/jackc/pglogrepl"
)

// Decoder decodes pgoutput protocol version 1 (messages 'true', no
// streaming). It caches Relation messages by OID for the life of one
// replication session. Not safe for concurrent use.
type Decoder struct {
	relations map[uint32]*decode.Relation
}

var _ decode.Decoder = (*Decoder)(nil)

// NewDecoder returns a decoder with an empty relation cache.
func NewDecoder() *Decoder {
	return &Decoder{relations: make(map[uint32]*decode.Relation)}
}

// Plugin returns "pgoutput".
func (*Decoder) Plugin() string { return "pgoutput" }

// StartOptions returns proto_version '1', the publication (as one quoted
// identifier, so its spelling is taken verbatim) and messages 'true'.
// Streaming and binary are left at their defaults (off).
func (*Decoder) StartOptions(publication string) ([]string, error) {
	if publication == "" || strings.ContainsRune(publication, 0) {
		return nil, decode.NewError(decode.ClassConfigInvalid, 0, "publication name is empty or contains NUL")
	}
	return []string{
		"proto_version '1'",
		"publication_names " + decode.QuoteOptionValue(decode.QuoteIdent(publication)),
		"messages 'true'",
	}, nil
}

// Capabilities: pgoutput protocol 1 with messages needs PostgreSQL 14.
func (*Decoder) Capabilities() decode.Capabilities {
	return decode.Capabilities{
		TransactionalMessages: true,
		Truncate:              true,
		CommitLSN:             true,
		Streaming:             false,
		MinServerVersionNum:   140000,
	}
}

// Relation returns the cached relation for oid.
func (p *Decoder) Relation(oid uint32) (*decode.Relation, bool) {
	r, ok := p.relations[oid]
	return r, ok
}

// Decode decodes one pgoutput payload into exactly one Message.
func (p *Decoder) Decode(walStart pglogrepl.LSN, data []byte) (msgs []decode.Message, err error) {
	if len(data) == 0 {
		return nil, decode.NewError(decode.ClassMalformed, walStart, "empty payload")
	}
	switch data[0] {
	case 'S', 'E', 'c', 'A':
		return nil, decode.NewError(decode.ClassStreamingUnsupported, walStart, "in-progress streaming message")
	case 'b', 'P', 'K', 'r', 'p':
		return nil, decode.NewError(decode.ClassUnsupportedMessage, walStart, "two-phase commit message")
	case 'B', 'C', 'O', 'Y', 'R', 'I', 'U', 'D', 'T', 'M':
	default:
		return nil, decode.NewError(decode.ClassUnsupportedMessage, walStart, "unknown message type")
	}
	if d := checkFrame(data); d != "" {
		return nil, decode.NewError(decode.ClassMalformed, walStart, d)
	}
	// Defence in depth: checkFrame admits only payloads pglogrepl.Parse can
	// read in bounds; a panic here would be a bug, reported without values.
	defer func() {
		if recover() != nil {
			msgs, err = nil, decode.NewError(decode.ClassMalformed, walStart, "payload rejected by parser")
		}
	}()
	raw, perr := pglogrepl.Parse(data)
	if perr != nil {
		return nil, decode.NewError(decode.ClassMalformed, walStart, "payload rejected by parser")
	}
	m, err := p.convert(walStart, raw)
	if err != nil {
		return nil, err
	}
	return []decode.Message{m}, nil
}

func (p *Decoder) convert(walStart pglogrepl.LSN, raw pglogrepl.Message) (decode.Message, error) {
	switch m := raw.(type) {
	case *pglogrepl.BeginMessage:
		return &decode.Begin{FinalLSN: m.FinalLSN, CommitTime: m.CommitTime, Xid: m.Xid}, nil
	case *pglogrepl.CommitMessage:
		return &decode.Commit{CommitLSN: m.CommitLSN, EndLSN: m.TransactionEndLSN, CommitTime: m.CommitTime}, nil
	case *pglogrepl.OriginMessage:
		return &decode.Origin{CommitLSN: m.CommitLSN, Name: m.Name}, nil
	case *pglogrepl.TypeMessage:
		return &decode.TypeInfo{OID: m.DataType, Namespace: m.Namespace, Name: m.Name}, nil
	case *pglogrepl.RelationMessage:
		rel := &decode.Relation{
			OID:             m.RelationID,
			Namespace:       m.Namespace,
			Name:            m.RelationName,
			ReplicaIdentity: m.ReplicaIdentity,
			Columns:         make([]decode.Column, len(m.Columns)),
		}
		for i, c := range m.Columns {
			rel.Columns[i] = decode.Column{Name: c.Name, TypeOID: c.DataType, TypeMod: c.TypeModifier, Key: c.Flags&1 != 0}
		}
		p.relations[rel.OID] = rel
		return rel, nil
	case *pglogrepl.InsertMessage:
		rel, err := p.lookup(walStart, m.RelationID)
		if err != nil {
			return nil, err
		}
		nt, err := tuple(walStart, rel, decode.TupleNew, m.Tuple)
		if err != nil {
			return nil, err
		}
		return &decode.Row{Op: decode.OpInsert, Relation: rel, New: nt}, nil
	case *pglogrepl.UpdateMessage:
		rel, err := p.lookup(walStart, m.RelationID)
		if err != nil {
			return nil, err
		}
		row := &decode.Row{Op: decode.OpUpdate, Relation: rel}
		if m.OldTuple != nil {
			if row.Old, err = tuple(walStart, rel, decode.TupleKind(m.OldTupleType), m.OldTuple); err != nil {
				return nil, err
			}
		}
		if row.New, err = tuple(walStart, rel, decode.TupleNew, m.NewTuple); err != nil {
			return nil, err
		}
		return row, nil
	case *pglogrepl.DeleteMessage:
		rel, err := p.lookup(walStart, m.RelationID)
		if err != nil {
			return nil, err
		}
		ot, err := tuple(walStart, rel, decode.TupleKind(m.OldTupleType), m.OldTuple)
		if err != nil {
			return nil, err
		}
		return &decode.Row{Op: decode.OpDelete, Relation: rel, Old: ot}, nil
	case *pglogrepl.TruncateMessage:
		t := &decode.Truncate{
			Relations:       make([]*decode.Relation, 0, len(m.RelationIDs)),
			Cascade:         m.Option&pglogrepl.TruncateOptionCascade != 0,
			RestartIdentity: m.Option&pglogrepl.TruncateOptionRestartIdentity != 0,
		}
		for _, oid := range m.RelationIDs {
			rel, err := p.lookup(walStart, oid)
			if err != nil {
				return nil, err
			}
			t.Relations = append(t.Relations, rel)
		}
		return t, nil
	case *pglogrepl.LogicalDecodingMessage:
		return &decode.LogicalMessage{
			Transactional: m.Transactional,
			LSN:           m.LSN,
			Prefix:        m.Prefix,
			Content:       append([]byte(nil), m.Content...),
		}, nil
	}
	return nil, decode.NewError(decode.ClassUnsupportedMessage, walStart, "unexpected parsed message")
}

func (p *Decoder) lookup(walStart pglogrepl.LSN, oid uint32) (*decode.Relation, error) {
	rel, ok := p.relations[oid]
	if !ok {
		e := decode.NewError(decode.ClassUnknownRelation, walStart, "row event for a relation without a relation message")
		e.RelationOID = oid
		return nil, e
	}
	return rel, nil
}

func tuple(walStart pglogrepl.LSN, rel *decode.Relation, kind decode.TupleKind, td *pglogrepl.TupleData) (*decode.Tuple, error) {
	if td == nil {
		return nil, decode.NewError(decode.ClassMalformed, walStart, "missing tuple")
	}
	if len(td.Columns) != len(rel.Columns) {
		e := decode.NewError(decode.ClassMalformed, walStart, "tuple column count differs from relation")
		e.RelationOID = rel.OID
		return nil, e
	}
	t := &decode.Tuple{Kind: kind, Values: make([]decode.Value, len(td.Columns))}
	for i, c := range td.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			t.Values[i] = decode.Value{Kind: decode.ValueNull}
		case pglogrepl.TupleDataTypeToast:
			t.Values[i] = decode.Value{Kind: decode.ValueUnchangedToast}
		case pglogrepl.TupleDataTypeText:
			t.Values[i] = decode.Value{Kind: decode.ValueText, Data: c.Data}
		case pglogrepl.TupleDataTypeBinary:
			t.Values[i] = decode.Value{Kind: decode.ValueBinary, Data: c.Data}
		default:
			return nil, decode.NewError(decode.ClassMalformed, walStart, "invalid tuple column kind")
		}
	}
	return t, nil
}
