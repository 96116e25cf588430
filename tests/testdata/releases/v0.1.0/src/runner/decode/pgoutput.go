package decode

import (
	"strings"

	"github.com/jackc/pglogrepl"
)

// PgOutput decodes pgoutput protocol version 1 (messages 'true', no
// streaming). It caches Relation messages by OID for the life of one
// replication session. Not safe for concurrent use.
type PgOutput struct {
	relations map[uint32]*Relation
}

var _ Decoder = (*PgOutput)(nil)

// NewPgOutput returns a decoder with an empty relation cache.
func NewPgOutput() *PgOutput {
	return &PgOutput{relations: make(map[uint32]*Relation)}
}

// Plugin returns "pgoutput".
func (*PgOutput) Plugin() string { return "pgoutput" }

// StartOptions returns proto_version '1', the publication (as one quoted
// identifier, so its spelling is taken verbatim) and messages 'true'.
// Streaming and binary are left at their defaults (off).
func (*PgOutput) StartOptions(publication string) ([]string, error) {
	if publication == "" || strings.ContainsRune(publication, 0) {
		return nil, newErr(ClassConfigInvalid, 0, "publication name is empty or contains NUL")
	}
	return []string{
		"proto_version '1'",
		"publication_names " + quoteOptionValue(quoteIdent(publication)),
		"messages 'true'",
	}, nil
}

// Capabilities: pgoutput protocol 1 with messages needs PostgreSQL 14.
func (*PgOutput) Capabilities() Capabilities {
	return Capabilities{
		TransactionalMessages: true,
		Truncate:              true,
		CommitLSN:             true,
		Streaming:             false,
		MinServerVersionNum:   140000,
	}
}

// Relation returns the cached relation for oid.
func (p *PgOutput) Relation(oid uint32) (*Relation, bool) {
	r, ok := p.relations[oid]
	return r, ok
}

// Decode decodes one pgoutput payload into exactly one Message.
func (p *PgOutput) Decode(walStart pglogrepl.LSN, data []byte) (msgs []Message, err error) {
	if len(data) == 0 {
		return nil, newErr(ClassMalformed, walStart, "empty payload")
	}
	switch data[0] {
	case 'S', 'E', 'c', 'A':
		return nil, newErr(ClassStreamingUnsupported, walStart, "in-progress streaming message")
	case 'b', 'P', 'K', 'r', 'p':
		return nil, newErr(ClassUnsupportedMessage, walStart, "two-phase commit message")
	case 'B', 'C', 'O', 'Y', 'R', 'I', 'U', 'D', 'T', 'M':
	default:
		return nil, newErr(ClassUnsupportedMessage, walStart, "unknown message type")
	}
	if d := checkFrame(data); d != "" {
		return nil, newErr(ClassMalformed, walStart, d)
	}
	// Defence in depth: checkFrame admits only payloads pglogrepl.Parse can
	// read in bounds; a panic here would be a bug, reported without values.
	defer func() {
		if recover() != nil {
			msgs, err = nil, newErr(ClassMalformed, walStart, "payload rejected by parser")
		}
	}()
	raw, perr := pglogrepl.Parse(data)
	if perr != nil {
		return nil, newErr(ClassMalformed, walStart, "payload rejected by parser")
	}
	m, err := p.convert(walStart, raw)
	if err != nil {
		return nil, err
	}
	return []Message{m}, nil
}

func (p *PgOutput) convert(walStart pglogrepl.LSN, raw pglogrepl.Message) (Message, error) {
	switch m := raw.(type) {
	case *pglogrepl.BeginMessage:
		return &Begin{FinalLSN: m.FinalLSN, CommitTime: m.CommitTime, Xid: m.Xid}, nil
	case *pglogrepl.CommitMessage:
		return &Commit{CommitLSN: m.CommitLSN, EndLSN: m.TransactionEndLSN, CommitTime: m.CommitTime}, nil
	case *pglogrepl.OriginMessage:
		return &Origin{CommitLSN: m.CommitLSN, Name: m.Name}, nil
	case *pglogrepl.TypeMessage:
		return &TypeInfo{OID: m.DataType, Namespace: m.Namespace, Name: m.Name}, nil
	case *pglogrepl.RelationMessage:
		rel := &Relation{
			OID:             m.RelationID,
			Namespace:       m.Namespace,
			Name:            m.RelationName,
			ReplicaIdentity: m.ReplicaIdentity,
			Columns:         make([]Column, len(m.Columns)),
		}
		for i, c := range m.Columns {
			rel.Columns[i] = Column{Name: c.Name, TypeOID: c.DataType, TypeMod: c.TypeModifier, Key: c.Flags&1 != 0}
		}
		p.relations[rel.OID] = rel
		return rel, nil
	case *pglogrepl.InsertMessage:
		rel, err := p.lookup(walStart, m.RelationID)
		if err != nil {
			return nil, err
		}
		nt, err := tuple(walStart, rel, TupleNew, m.Tuple)
		if err != nil {
			return nil, err
		}
		return &Row{Op: OpInsert, Relation: rel, New: nt}, nil
	case *pglogrepl.UpdateMessage:
		rel, err := p.lookup(walStart, m.RelationID)
		if err != nil {
			return nil, err
		}
		row := &Row{Op: OpUpdate, Relation: rel}
		if m.OldTuple != nil {
			if row.Old, err = tuple(walStart, rel, TupleKind(m.OldTupleType), m.OldTuple); err != nil {
				return nil, err
			}
		}
		if row.New, err = tuple(walStart, rel, TupleNew, m.NewTuple); err != nil {
			return nil, err
		}
		return row, nil
	case *pglogrepl.DeleteMessage:
		rel, err := p.lookup(walStart, m.RelationID)
		if err != nil {
			return nil, err
		}
		ot, err := tuple(walStart, rel, TupleKind(m.OldTupleType), m.OldTuple)
		if err != nil {
			return nil, err
		}
		return &Row{Op: OpDelete, Relation: rel, Old: ot}, nil
	case *pglogrepl.TruncateMessage:
		t := &Truncate{
			Relations:       make([]*Relation, 0, len(m.RelationIDs)),
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
		return &LogicalMessage{
			Transactional: m.Transactional,
			LSN:           m.LSN,
			Prefix:        m.Prefix,
			Content:       append([]byte(nil), m.Content...),
		}, nil
	}
	return nil, newErr(ClassUnsupportedMessage, walStart, "unexpected parsed message")
}

func (p *PgOutput) lookup(walStart pglogrepl.LSN, oid uint32) (*Relation, error) {
	rel, ok := p.relations[oid]
	if !ok {
		e := newErr(ClassUnknownRelation, walStart, "row event for a relation without a relation message")
		e.RelationOID = oid
		return nil, e
	}
	return rel, nil
}

func tuple(walStart pglogrepl.LSN, rel *Relation, kind TupleKind, td *pglogrepl.TupleData) (*Tuple, error) {
	if td == nil {
		return nil, newErr(ClassMalformed, walStart, "missing tuple")
	}
	if len(td.Columns) != len(rel.Columns) {
		e := newErr(ClassMalformed, walStart, "tuple column count differs from relation")
		e.RelationOID = rel.OID
		return nil, e
	}
	t := &Tuple{Kind: kind, Values: make([]Value, len(td.Columns))}
	for i, c := range td.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			t.Values[i] = Value{Kind: ValueNull}
		case pglogrepl.TupleDataTypeToast:
			t.Values[i] = Value{Kind: ValueUnchangedToast}
		case pglogrepl.TupleDataTypeText:
			t.Values[i] = Value{Kind: ValueText, Data: c.Data}
		case pglogrepl.TupleDataTypeBinary:
			t.Values[i] = Value{Kind: ValueBinary, Data: c.Data}
		default:
			return nil, newErr(ClassMalformed, walStart, "invalid tuple column kind")
		}
	}
	return t, nil
}
