package runner

import (
	"encoding/hex"
	"encoding/json"
	"slices"
	"unicode/utf8"

	"github.com/synchro/synchro/runner/decode"
)

// Type OIDs whose pgoutput text is itself JSON: staged as JSON values, not strings.
const (
	oidJSON  = 114
	oidJSONB = 3802
)

// Type OIDs staged as the JSON value to_jsonb() gives them, not as a string of their
// text: integers as numbers (their text output is the number), booleans as true and
// false. With json, jsonb and the types staged as strings (text, varchar, uuid, ...),
// a relation whose registered columns all have such types is staged already in its
// row image's shape, and materialization uses the staged object as the image instead
// of rendering it again (synchro._image_sql: the same list of types, by OID).
const (
	oidBool = 16
	oidInt8 = 20
	oidInt2 = 21
	oidInt4 = 23
)

// Staged row kinds: the "kind" column of pg_temp.synchro_stage.
const (
	StageRelation byte = 'R'
	StageInsert   byte = 'I'
	StageUpdate   byte = 'U'
	StageDelete   byte = 'D'
	StageTruncate byte = 'T'
	StageMessage  byte = 'M'
)

// StageColumns are the columns of pg_temp.synchro_stage, in COPY order.
var StageColumns = []string{
	"txn", "seq", "kind", "event_ordinal", "relid", "nspname", "relname", "replident",
	"col_names", "col_types", "col_keys", "new_row", "old_row", "toast", "truncated",
	"prefix", "f_kind", "f_relation_id", "f_schema", "f_table", "f_op", "f_old_key", "f_new_key",
	"f_version", "f_fence_id", "f_ordinal", "f_table_id", "a_generation", "a_previous", "pair_no",
}

// StageRow is one row of pg_temp.synchro_stage. Nil slices and nil pointers are
// NULL. NewRow and OldRow hold JSON text. A message row carries its parsed,
// authenticated fields as typed columns (Fence or Activation): materialization
// neither re-parses JSON nor recomputes the MAC. A StageRow carries row values:
// it implements no Stringer and must never be logged.
type StageRow struct {
	Txn          int32 // the source transaction's index in its batch
	Seq          int32
	Kind         byte
	EventOrdinal *int32
	RelID        *uint32
	Nspname      *string
	Relname      *string
	Replident    *byte
	ColNames     []string
	ColTypes     []uint32
	ColKeys      []bool
	NewRow       []byte
	OldRow       []byte
	Toast        []string
	Truncated    []uint32
	Prefix       *string
	Fence        *decode.Fence      // a synchro.fence message
	Activation   *decode.Activation // a synchro.registry message
	// PairNo numbers a transaction's row events (I, U, D) and its fences, each from
	// 1 in decoded order (Stager.Row, Stager.Fence): materialization pairs the k-th
	// row event with the k-th fence when that pairing is the ADR's (see Stager).
	PairNo *int32
}

// size is what the row counts against Config.BatchBytes: its row data and
// message content, plus a little for the other columns.
func (s *StageRow) size() int64 {
	n := int64(len(s.NewRow)+len(s.OldRow)) + 64
	if f := s.Fence; f != nil {
		n += int64(len(f.Schema)+len(f.Table)+2*len(f.Key())+len(f.Version)+len(f.TableID)) + 96
	}
	return n
}

// Values returns the row's column values in StageColumns order, as Go values pgx
// can encode. The COPY itself sends AppendBinary's encoding (stagecopy.go), which
// TestRunnerStageBinaryMatchesPgx compares, column by column, with pgx's encoding of
// these.
func (s *StageRow) Values() []any {
	v := make([]any, 0, len(StageColumns))
	v = append(v, s.Txn, s.Seq, s.Kind, nullable(s.EventOrdinal), nullable(s.RelID),
		nullable(s.Nspname), nullable(s.Relname), nullable(s.Replident))
	v = append(v, nilIfEmpty(s.ColNames), nilIfEmpty(s.ColTypes), nilIfEmpty(s.ColKeys))
	v = append(v, jsonOrNil(s.NewRow), jsonOrNil(s.OldRow), nilIfEmpty(s.Toast), nilIfEmpty(s.Truncated))
	v = append(v, nullable(s.Prefix))
	if f := s.Fence; f != nil {
		var tableID any
		if f.Kind == decode.FenceSynced {
			tableID = f.TableID
		}
		v = append(v, string(f.Kind), f.RelationID, f.Schema, f.Table, string(f.Op), nullable(f.OldKey),
			nullable(f.NewKey), f.Version, uuidBytes(f.FenceID), f.Ordinal, tableID)
	} else {
		v = append(v, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil)
	}
	if a := s.Activation; a != nil {
		v = append(v, a.Generation, nullable(a.Previous))
	} else {
		v = append(v, nil, nil)
	}
	return append(v, nullable(s.PairNo))
}

func nullable[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func nilIfEmpty[T any](s []T) any {
	if s == nil {
		return nil
	}
	return s
}

func jsonOrNil(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// uuidBytes returns the 16 bytes of a canonical UUID (the parser checked its
// form), which COPY sends as a uuid; nil (NULL) if it is not one.
func uuidBytes(s string) any {
	if len(s) != 36 {
		return nil
	}
	var b [16]byte
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(b[:], []byte(h)); err != nil {
		return nil
	}
	return b
}

// Stager turns a batch's collated events into staged rows. It numbers every
// staged row (seq, from 0 in each source transaction), marks it with the
// transaction's index in its batch (txn) and stages a relation ('R') row before
// the first row event of each relation shape in the batch: once per batch, not
// once per transaction (a 1-row transaction staged three rows, and the Relation
// row was a third of the COPY's cost). Materialization finds the shape a
// transaction's events were decoded with in the batch's staged rows
// (synchro._stage_relations): the R rows staged in it, and the last one staged
// before it for a relation it touches. A transaction re-run alone after a failed
// batch is a batch of its own, so it stages its own shapes as before, and a poison
// keeps its identity. Call NewBatch when a batch opens and Reset at every Begin.
// Not safe for concurrent use.
//
// Positional pairing numbers (StageRow.PairNo). The ADR pairs, per row identity
// in a transaction, the k-th row event in source order with the fence of the k-th
// lowest registered-DML ordinal. The Stager numbers a transaction's row events in
// decoded order and its fences in decoded order too, but only while their ordinals
// rise (a transaction's fences are emitted by one backend, which draws its ordinals
// from one sequence in the order it emits them, so they always do); a fence out of
// that order and every later one of the transaction get none. When each row event
// and the fence of the same number match (same relation, key and operation: the SQL
// checks all of it), numbering both sides in order restricts, for each row identity,
// to the ADR's pairing: the set-based path then pairs by number with one hash join
// instead of ranking both sides (synchro._mat_run_pair_fences), and pairs by rank
// whenever numbers do not pair every row event (rows changed by an earlier row's
// trigger, whose fences interleave differently).
//
// Only registered columns of a row are staged (SetRegistered): a value in a column
// nobody registered (json that jsonb refuses, a huge document) never reaches
// materialization, so it cannot stop the stream. The relation row still lists every
// column's name and type, so materialization sees drift.
type Stager struct {
	txn    int32
	seq    int32
	rowNo  int32 // row events staged in this transaction
	fenceN int32 // fences numbered in this transaction
	// lastOrd is the ordinal of the last fence numbered; fenceOff: a fence came out of
	// ordinal order, so no later fence of the transaction is numbered.
	lastOrd  int64
	fenceOff bool
	staged   map[uint32]*decode.Relation // relation shape already staged in this batch
	// registered: relation OID → the names of its registered columns (every
	// generation's, key included). A relation not in it stages its key columns
	// only: it is not registered, and materialization refuses its events.
	registered map[uint32]map[string]struct{}
}

// NewStager returns a Stager for the first transaction.
func NewStager() *Stager {
	return &Stager{staged: make(map[uint32]*decode.Relation), registered: make(map[uint32]map[string]struct{})}
}

// SetRegistered replaces the registered columns of every relation.
func (s *Stager) SetRegistered(reg map[uint32]map[string]struct{}) { s.registered = reg }

// Registered reports whether relation oid has registered columns.
func (s *Stager) Registered(oid uint32) bool {
	_, ok := s.registered[oid]
	return ok
}

// NewBatch starts a new materialization batch: every relation shape is staged
// again before its first use in it.
func (s *Stager) NewBatch() { clear(s.staged) }

// Reset starts a new source transaction, the txn-th of its batch (from 0). Shapes
// staged earlier in the batch are not staged again (NewBatch).
func (s *Stager) Reset(txn int32) {
	s.txn = txn
	s.seq = 0
	s.rowNo, s.fenceN, s.lastOrd, s.fenceOff = 0, 0, 0, false
}

// Staged returns the number of rows staged in this transaction.
func (s *Stager) Staged() int32 { return s.seq }

func (s *Stager) next() int32 {
	n := s.seq
	s.seq++
	return n
}

// relation appends an 'R' row for rel unless this exact shape was already staged
// in this batch. A new Relation message for the same OID (DDL in or between the
// batch's transactions) is a new shape and is staged again, so the SQL sees the
// drift.
func (s *Stager) relation(out []StageRow, rel *decode.Relation) []StageRow {
	if s.staged[rel.OID] == rel {
		return out
	}
	s.staged[rel.OID] = rel
	r := StageRow{
		Txn:       s.txn,
		Seq:       s.next(),
		Kind:      StageRelation,
		RelID:     ptr(rel.OID),
		Nspname:   ptr(rel.Namespace),
		Relname:   ptr(rel.Name),
		Replident: ptr(rel.ReplicaIdentity),
		ColNames:  make([]string, len(rel.Columns)),
		ColTypes:  make([]uint32, len(rel.Columns)),
		ColKeys:   make([]bool, len(rel.Columns)),
	}
	for i, c := range rel.Columns {
		r.ColNames[i], r.ColTypes[i], r.ColKeys[i] = c.Name, c.TypeOID, c.Key
	}
	return append(out, r)
}

// Row appends the staged rows of one row event (its relation row first when
// needed) to out.
func (s *Stager) Row(out []StageRow, ordinal uint64, row *decode.Row) ([]StageRow, error) {
	if row == nil || row.Relation == nil {
		return out, &decode.Error{Class: decode.ClassMalformed, Detail: "row event without relation"}
	}
	ord, err := ordinal32(ordinal)
	if err != nil {
		return out, err
	}
	rel := row.Relation
	out = s.relation(out, rel)
	r := StageRow{Txn: s.txn, EventOrdinal: ptr(ord), RelID: ptr(rel.OID)}
	switch row.Op {
	case decode.OpInsert:
		r.Kind = StageInsert
	case decode.OpUpdate:
		r.Kind = StageUpdate
	case decode.OpDelete:
		r.Kind = StageDelete
	default:
		return out, &decode.Error{Class: decode.ClassMalformed, Detail: "row event with invalid operation", RelationOID: rel.OID}
	}
	cols := s.registered[rel.OID]
	if row.New != nil {
		if r.NewRow, r.Toast, err = encodeTuple(rel, keyFromOld(rel, row.New, row.Old), cols); err != nil {
			return out, err
		}
	}
	if row.Old != nil {
		if r.OldRow, _, err = encodeTuple(rel, row.Old, cols); err != nil {
			return out, err
		}
	}
	r.Seq = s.next()
	s.rowNo++
	r.PairNo = ptr(s.rowNo)
	return append(out, r), nil
}

// keyFromOld returns the new image of an update with each key column that came as
// unchanged TOAST taken from the old image. A key stored out of line (a long text key
// in a wide row) is not sent when the update leaves it as it is (pgoutput's 'u',
// a column wal2json leaves out), and PostgreSQL then logs the old key image, which
// carries it: the value is the same, since it did not change. Without this the staged
// row had no key, and a good transaction was quarantined as a fence mismatch
// (TestRunnerToastedKeyUpdate). n itself is returned when there is nothing to take.
func keyFromOld(rel *decode.Relation, n, o *decode.Tuple) *decode.Tuple {
	if o == nil || len(o.Values) != len(n.Values) || len(n.Values) != len(rel.Columns) {
		return n // encodeTuple refuses a tuple that does not match its relation
	}
	var out *decode.Tuple
	for i, c := range rel.Columns {
		if !c.Key || n.Values[i].Kind != decode.ValueUnchangedToast || o.Values[i].Kind != decode.ValueText {
			continue
		}
		if out == nil {
			out = &decode.Tuple{Kind: n.Kind, Values: slices.Clone(n.Values)}
		}
		out.Values[i] = o.Values[i]
	}
	if out == nil {
		return n
	}
	return out
}

// Truncate appends the staged rows of one truncate event.
func (s *Stager) Truncate(out []StageRow, ordinal uint64, t *decode.Truncate) ([]StageRow, error) {
	ord, err := ordinal32(ordinal)
	if err != nil {
		return out, err
	}
	oids := make([]uint32, 0, len(t.Relations))
	for _, rel := range t.Relations {
		out = s.relation(out, rel)
		oids = append(oids, rel.OID)
	}
	return append(out, StageRow{Txn: s.txn, Seq: s.next(), Kind: StageTruncate, EventOrdinal: ptr(ord), Truncated: oids}), nil
}

// Fence appends a staged row for a parsed, authenticated synchro.fence message.
// It numbers the fence (PairNo) while the transaction's fences come in rising
// ordinal order.
func (s *Stager) Fence(out []StageRow, f *decode.Fence) []StageRow {
	r := StageRow{Txn: s.txn, Seq: s.next(), Kind: StageMessage, Prefix: ptr(decode.PrefixFence), Fence: f}
	if !s.fenceOff && (s.fenceN == 0 || f.Ordinal > s.lastOrd) {
		s.fenceN++
		s.lastOrd = f.Ordinal
		r.PairNo = ptr(s.fenceN)
	} else {
		s.fenceOff = true
	}
	return append(out, r)
}

// Activation appends a staged row for a parsed, authenticated synchro.registry
// message.
func (s *Stager) Activation(out []StageRow, a *decode.Activation) []StageRow {
	return append(out, StageRow{Txn: s.txn, Seq: s.next(), Kind: StageMessage, Prefix: ptr(decode.PrefixRegistry), Activation: a})
}

func ordinal32(o uint64) (int32, error) {
	if o > 1<<31-1 {
		return 0, &decode.Error{Class: decode.ClassMalformed, Detail: "event ordinal exceeds int range"}
	}
	return int32(o), nil
}

// encodeTuple renders a tuple as a JSON object: column name → the text output as
// a JSON string (json and jsonb columns as their JSON value, integers as numbers,
// booleans as true or false: see oidBool), NULL as null.
// Unchanged-TOAST columns are omitted and returned in toast. A key-only old image
// (TupleKey) carries only its key columns: pgoutput sends the others as nulls that
// are not the row's values. Only key columns and the columns in registered are
// rendered (nil: key columns only).
func encodeTuple(rel *decode.Relation, t *decode.Tuple, registered map[string]struct{}) (obj []byte, toast []string, err error) {
	if len(t.Values) != len(rel.Columns) {
		return nil, nil, &decode.Error{Class: decode.ClassMalformed, Detail: "tuple column count differs from relation", RelationOID: rel.OID}
	}
	size := 2
	for _, v := range t.Values {
		size += len(v.Data) + 8
	}
	obj = make([]byte, 0, size)
	obj = append(obj, '{')
	first := true
	for i, c := range rel.Columns {
		v := t.Values[i]
		if t.Kind == decode.TupleKey && !c.Key {
			continue
		}
		if _, ok := registered[c.Name]; !ok && !c.Key {
			continue // never registered: its value is nobody's business here
		}
		if v.Kind == decode.ValueUnchangedToast {
			toast = append(toast, c.Name)
			continue
		}
		if !first {
			obj = append(obj, ',')
		}
		first = false
		if !utf8.ValidString(c.Name) {
			return nil, nil, &decode.Error{Class: decode.ClassMalformed, Detail: "column name is not valid UTF-8", RelationOID: rel.OID}
		}
		obj = appendJSONString(obj, c.Name)
		obj = append(obj, ':')
		switch v.Kind {
		case decode.ValueNull:
			obj = append(obj, "null"...)
		case decode.ValueText:
			if !utf8.Valid(v.Data) {
				return nil, nil, &decode.Error{Class: decode.ClassMalformed, Detail: "column text is not valid UTF-8", RelationOID: rel.OID}
			}
			switch c.TypeOID {
			case oidJSON, oidJSONB:
				if !json.Valid(v.Data) {
					return nil, nil, &decode.Error{Class: decode.ClassMalformed, Detail: "json column text is not valid JSON", RelationOID: rel.OID}
				}
				obj = append(obj, v.Data...)
			case oidInt2, oidInt4, oidInt8:
				if !isInteger(v.Data) {
					return nil, nil, &decode.Error{Class: decode.ClassMalformed, Detail: "integer column text is not an integer", RelationOID: rel.OID}
				}
				obj = append(obj, v.Data...)
			case oidBool:
				switch string(v.Data) {
				case "t":
					obj = append(obj, "true"...)
				case "f":
					obj = append(obj, "false"...)
				default:
					return nil, nil, &decode.Error{Class: decode.ClassMalformed, Detail: "boolean column text is not t or f", RelationOID: rel.OID}
				}
			default:
				obj = appendJSONString(obj, string(v.Data))
			}
		case decode.ValueBinary:
			return nil, nil, &decode.Error{Class: decode.ClassMalformed, Detail: "binary column value was not requested", RelationOID: rel.OID}
		default:
			return nil, nil, &decode.Error{Class: decode.ClassMalformed, Detail: "invalid column value kind", RelationOID: rel.OID}
		}
	}
	obj = append(obj, '}')
	return obj, toast, nil
}

// isInteger reports whether b is an integer type's text output: an optional minus
// sign and 1 to 19 decimal digits (int8's range fits in 19 digits), so that it is
// also a valid JSON number.
func isInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s (valid UTF-8) as a JSON string literal. Only the
// characters JSON requires are escaped, so the text round-trips byte for byte.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
