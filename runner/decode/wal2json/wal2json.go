// Package wal2json is the wal2json output plugin (format version 2, Debian's
// postgresql-15-wal2json 2.5) behind decode.Plugin: one JSON document per
// action (B, C, I, U, D, T, M), decoded into the same neutral messages
// pgoutput's payloads give, so materialization cannot tell the two apart.
//
// wal2json has no publication and sends no relation messages. At every
// session start the plugin reads the table set from the registry
// (synchro.runner_table_set) and each relation's shape from the live catalog
// (pg_class.relreplident, the replica identity index, the live columns), names
// the tables in add-tables, and synthesizes the Relation that pgoutput would
// have sent. Every change's column list is checked against it; a change whose
// columns differ (a column added, dropped or retyped) makes the decoder emit
// the new shape before the change, so materialization sees the drift exactly
// as with pgoutput. A replica identity change shows in the identity list of
// the next update or delete (FULL, USING INDEX) or is caught at the next
// session start (docs/decoders.md names the windows).
//
// Values are text as the type's output function wrote it, as pgoutput's are:
// strings are unescaped, booleans map back to t and f, bytea gets back the \x
// wal2json strips, and numbers keep their literal text. wal2json 2.5 prints
// float4, float8 and numeric as bare JSON numbers and their NaN and Infinity
// as null, which cannot be told from NULL: a registered column of those types
// is refused at session start (class value_not_representable).
package wal2json

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro/synchro/gen"
	"github.com/synchro/synchro/runner/decode"
)

// Name is the output plugin name.
const Name = "wal2json"

// Type OIDs wal2json renders specially (wal2json.c, pg_decode_write_value).
const (
	oidBool    = 16
	oidBytea   = 17
	oidInt8    = 20
	oidInt2    = 21
	oidInt4    = 23
	oidOID     = 26
	oidFloat4  = 700
	oidFloat8  = 701
	oidNumeric = 1700
)

// Plugin is wal2json. The zero value speaks format version 2.
type Plugin struct {
	// FormatVersion is the wal2json format version (0 means 2). Version 1
	// (one document per transaction, no per-change LSN) is declared so that it
	// is refused by capability, never decoded.
	FormatVersion int
}

var (
	_ decode.Plugin = Plugin{}
	_ decode.Prober = Plugin{}
)

// Name returns "wal2json".
func (Plugin) Name() string { return Name }

func (p Plugin) format() int {
	if p.FormatVersion == 0 {
		return 2
	}
	return p.FormatVersion
}

// Capabilities: format 2 carries transactional messages (M), truncates (T),
// the commit LSN and end LSN (C's lsn and nextlsn) and every change's lsn.
// Format 1 has no per-change LSN and one document per transaction.
func (p Plugin) Capabilities() decode.Capabilities {
	return decode.Capabilities{
		TransactionalMessages: true,
		Truncate:              true,
		CommitLSN:             p.format() == 2,
		MinServerVersionNum:   110000,
	}
}

// SlotOptions: a logical slot with an exported snapshot.
func (Plugin) SlotOptions() pglogrepl.CreateReplicationSlotOptions {
	return pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication}
}

// baseOptions are the START_REPLICATION options of format 2 without the table
// set, in the order they are sent.
func baseOptions() []string {
	return []string{
		option("format-version", "2"),
		option("include-transaction", "true"),
		option("include-xids", "true"),
		option("include-timestamp", "true"),
		option("include-lsn", "true"),
		option("include-types", "false"),
		option("include-type-oids", "true"),
		option("include-pk", "true"),
		// No add-msg-prefixes: every logical message is sent, as pgoutput's
		// messages 'true' sends them. A filter would drop the transactions that
		// carry only a message of another prefix (pgoutput's are materialized,
		// as transactions without events: a stream reset's marker is one) and
		// the unknown synchro. prefixes the collator counts, so the two decoders
		// would materialize differently (TestDecoderDifferential).
	}
}

// option renders one START_REPLICATION plugin option: the name as a quoted
// identifier (wal2json's names hold '-'), the value as a string literal.
func option(name, value string) string {
	return `"` + name + `" ` + decode.QuoteOptionValue(value)
}

// Probe checks that the server's wal2json accepts every option the runner
// sends, on a temporary slot of this connection (dropped at once; the stream's
// slot is not created yet). A build that refuses one (an older wal2json
// without format 2 or include-pk) is refused by capability, never used with
// fewer options.
func (p Plugin) Probe(ctx context.Context, db decode.Querier) error {
	if err := decode.CheckCapabilities(p, 0); err != nil {
		return err
	}
	if err := ProbeOptions(ctx, db, baseOptions()); err != nil {
		return err
	}
	// A registered column this plugin cannot carry is refused now too, before
	// the first start creates the stream (and at every session start after).
	if _, err := p.Open(ctx, db, decode.SessionSpec{}); err != nil {
		if c, ok := decode.ClassOf(err); ok && (c == decode.ClassValueNotRepresentable || c == decode.ClassConfigInvalid) {
			return err
		}
	}
	return nil
}

// Options are the START_REPLICATION options every session sends before its
// add-tables (for the option probe and its tests).
func Options() []string { return baseOptions() }

// ProbeOptions runs wal2json's option check for opts (each `"name" 'value'`)
// on a temporary slot. An option the build rejects (SQLSTATE 22023) is an
// *decode.Error of class decoder_capability_unsupported.
func ProbeOptions(ctx context.Context, db decode.Querier, opts []string) error {
	args := make([]any, 0, 2*len(opts))
	ph := make([]string, 0, 2*len(opts))
	for _, o := range opts {
		name, val, ok := strings.Cut(o, " ")
		if !ok || len(name) < 2 || name[0] != '"' || name[len(name)-1] != '"' ||
			len(val) < 2 || val[0] != '\'' || val[len(val)-1] != '\'' {
			return decode.NewError(decode.ClassConfigInvalid, 0, "wal2json option is not of the form \"name\" 'value'")
		}
		args = append(args, name[1:len(name)-1], strings.ReplaceAll(val[1:len(val)-1], "''", "'"))
		ph = append(ph, fmt.Sprintf("$%d::text, $%d::text", len(args)-1, len(args)))
	}
	// The temporary slot belongs to this session and is dropped at once, also
	// when the peek fails (and by the server when the session ends).
	var slot string
	if err := db.QueryRow(ctx, `SELECT slot_name::text FROM pg_catalog.pg_create_logical_replication_slot(
		'synchro_probe_' || pg_catalog.pg_backend_pid(), 'wal2json', true)`).Scan(&slot); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "58P01" { // undefined_file: no wal2json.so
			return decode.NewError(decode.ClassCapabilityUnsupported, 0, "output plugin wal2json is not installed on the server")
		}
		return fmt.Errorf("synchro: wal2json probe: create temporary slot: %w", err)
	}
	defer func() {
		_, _ = db.Exec(context.WithoutCancel(ctx), "SELECT pg_catalog.pg_drop_replication_slot($1)", slot)
	}()
	q := "SELECT count(*) FROM pg_catalog.pg_logical_slot_peek_changes($" + strconv.Itoa(len(args)+1) +
		"::name, NULL, 0, VARIADIC ARRAY[" + strings.Join(ph, ", ") + "])"
	var n int64
	err := db.QueryRow(ctx, q, append(args, slot)...).Scan(&n)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22023" { // invalid_parameter_value: an unknown option
		return decode.NewError(decode.ClassCapabilityUnsupported, 0,
			"the server's wal2json rejects an option the decoder requires (format-version 2, include-*, add-tables)")
	}
	if err != nil {
		return fmt.Errorf("synchro: wal2json probe: %w", err)
	}
	return nil
}

// relState is one relation of the table set.
type relState struct {
	rel      *decode.Relation // the current shape
	typlen   map[string]int32 // catalog type length by column name (-1: varlena)
	firstGen int64            // the first activated generation that registers it
	gens     []int64          // every activated generation that registers it (nil: all from firstGen)
	// nonRepUntil: the latest generation that registers a float4, float8 or numeric
	// column of it (0: none does, or the latest does and the session was refused).
	nonRepUntil int64
}

// Open reads the table set and the catalog shape of its relations and
// returns a session. A registered float4, float8 or numeric column is refused
// (value_not_representable): wal2json 2.5 cannot carry its NaN and Infinity.
func (p Plugin) Open(ctx context.Context, db decode.Querier, spec decode.SessionSpec) (decode.Session, error) {
	if err := decode.CheckCapabilities(p, 0); err != nil {
		return nil, err
	}
	q := gen.New(db)
	set, err := q.RunnerTableSet(ctx)
	if err != nil {
		return nil, fmt.Errorf("synchro: runner_table_set: %w", err)
	}
	if len(set) == 0 {
		// Without add-tables wal2json would send every table: never.
		return nil, errors.New("synchro: wal2json: no relation is registered in an activated generation yet")
	}
	relids := make([]int64, len(set))
	for i, t := range set {
		relids[i] = t.Relid
	}
	shapes, err := q.RelationShapes(ctx, relids)
	if err != nil {
		return nil, fmt.Errorf("synchro: wal2json: read relation shapes: %w", err)
	}
	byOID := make(map[int64]gen.RelationShapesRow, len(shapes))
	for _, s := range shapes {
		byOID[s.Relid] = s
	}
	tables := make([]Table, 0, len(set))
	for _, t := range set {
		sh, ok := byOID[t.Relid]
		if !ok {
			// Dropped: nothing of it can arrive; materialization and readiness
			// report the registered relation as missing.
			continue
		}
		// Each registered column with the latest activated generation that registers
		// it: only a column a generation this session can still decode registers
		// matters (the generation in effect at its start, or a later one).
		registered := make(map[string]int64, len(t.Columns))
		for i, c := range t.Columns {
			if i < len(t.ColumnGenerations) {
				registered[c] = t.ColumnGenerations[i]
			}
		}
		rel := decode.Relation{
			OID:       uint32(sh.Relid),
			Namespace: sh.Nspname,
			Name:      sh.Relname,
			Columns:   make([]decode.Column, len(sh.ColNames)),
		}
		if len(sh.Replident) == 1 {
			rel.ReplicaIdentity = sh.Replident[0]
		}
		tb := Table{Relation: rel, TypLens: make([]int32, len(sh.ColNames)), FirstGeneration: t.FirstGeneration,
			Generations: t.Generations}
		for i, name := range sh.ColNames {
			rel.Columns[i] = decode.Column{Name: name, TypeOID: uint32(sh.ColTypes[i]), TypeMod: sh.ColTypmods[i], Key: sh.ColKeys[i]}
			tb.TypLens[i] = sh.ColTyplens[i]
			last, reg := registered[name]
			if !reg || !notRepresentable(uint32(sh.ColTypes[i])) || last < spec.RegistryGeneration {
				continue
			}
			if last >= set[0].LatestGeneration {
				return nil, notRepresentableErr(rel.OID, 0)
			}
			// Registered only by generations before the latest (set_columns took it
			// out, or the relation was unregistered): refused only if a row of the
			// relation arrives while one of them is in effect (session.row).
			tb.NotRepresentableUntil = max(tb.NotRepresentableUntil, last)
		}
		tables = append(tables, tb)
	}
	if len(tables) == 0 {
		return nil, errors.New("synchro: wal2json: no registered relation exists in the catalog")
	}
	return NewSession(tables, spec, set[0].LatestGeneration)
}

// Table is one relation of a session's table set: its shape as pgoutput's
// Relation message would give it, each column's catalog type length (-1:
// varlena, the only kind an unchanged TOAST value can be), and the activated
// registry generations that register it.
type Table struct {
	Relation        decode.Relation
	TypLens         []int32 // aligned with Relation.Columns
	FirstGeneration int64
	// Generations are the activated generations that register it, ascending; nil
	// means every generation from FirstGeneration on.
	Generations []int64
	// NotRepresentableUntil: a float4, float8 or numeric column is registered in
	// generations up to this one (0: none), none later. A row of the relation while
	// such a generation is in effect is refused (value_not_representable).
	NotRepresentableUntil int64
}

// NewSession returns the session of a table set read elsewhere (Open reads it
// from the database; tests build it): latest is the latest activated registry
// generation the table set knows.
func NewSession(tables []Table, spec decode.SessionSpec, latest int64) (decode.Session, error) {
	s := &session{
		rels:      make(map[relKey]*relState, len(tables)),
		curGen:    spec.RegistryGeneration,
		latest:    latest,
		skipLSN:   spec.RestartedAt,
		authentic: spec.Authentic,
	}
	names := make([]string, 0, len(tables))
	for _, tb := range tables {
		rel := tb.Relation
		if len(tb.TypLens) != len(rel.Columns) {
			return nil, decode.NewError(decode.ClassConfigInvalid, 0, "table type lengths differ from its columns")
		}
		name, err := tableName(rel.Namespace, rel.Name)
		if err != nil {
			e := err.(*decode.Error)
			e.RelationOID = rel.OID
			return nil, e
		}
		names = append(names, name)
		st := &relState{rel: &rel, typlen: make(map[string]int32, len(rel.Columns)), firstGen: tb.FirstGeneration,
			gens: tb.Generations, nonRepUntil: tb.NotRepresentableUntil}
		for i, c := range rel.Columns {
			st.typlen[c.Name] = tb.TypLens[i]
		}
		s.rels[relKey{rel.Namespace, rel.Name}] = st
	}
	s.opts = append(baseOptions(), option("add-tables", strings.Join(names, ",")))
	return s, nil
}

func notRepresentableErr(oid uint32, at pglogrepl.LSN) error {
	e := decode.NewError(decode.ClassValueNotRepresentable, at,
		"decoder wal2json cannot carry NaN or Infinity of a registered float4, float8 or numeric column (use pgoutput, or a domain over the type)")
	e.RelationOID = oid
	return e
}

// notRepresentable: types wal2json 2.5 prints as bare JSON numbers whose NaN or
// Infinity it prints as null. Only the type itself: a domain over one of them
// is printed as a quoted string, NaN included.
func notRepresentable(oid uint32) bool {
	return oid == oidFloat4 || oid == oidFloat8 || oid == oidNumeric
}

// tableName renders schema.table for add-tables, escaping what wal2json's
// parser treats specially ('.', ',', '*', '\' and white space) with '\'. A
// name that is exactly "*" is written "\*": wal2json 2.5 tests for its wildcard
// before it removes the escapes, so that is the literal name
// (TestDecoderEdgeWal2jsonTableNamedStar writes an unregistered table beside it).
func tableName(schema, table string) (string, error) {
	return escapeName(schema) + "." + escapeName(table), nil
}

func escapeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '.', ',', '*', '\\', ' ', '\t', '\n', '\v', '\f', '\r':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

type relKey struct{ schema, table string }

// session decodes one replication session's payloads. Not safe for
// concurrent use.
type session struct {
	opts []string
	rels map[relKey]*relState

	curGen  int64         // registry generation in effect at the decoding position
	latest  int64         // latest activated generation the table set knows
	skipLSN pglogrepl.LSN // an activation that already ended a session
	// authentic: SessionSpec.Authentic, the only activations the session follows.
	authentic func(*decode.Activation) bool

	// pending holds the Begin of the open transaction until its first change:
	// wal2json sends B and C for every transaction (also those that change
	// nothing in the table set), pgoutput sends nothing for them.
	pending  *decode.Begin
	beginEnd pglogrepl.LSN // the end LSN the Begin announced
	// lastChange is the lsn of the open transaction's last change.
	lastChange pglogrepl.LSN
	inTxn      bool
	emitted    bool
}

func (s *session) StartOptions() []string { return s.opts }

var (
	beginHead   = []byte(`{"action":"B"`)
	commitHead  = []byte(`{"action":"C"`)
	messageHead = []byte(`{"action":"M"`)
)

// Boundary reads the action of the document's first field.
func (*session) Boundary(data []byte) decode.Boundary {
	switch {
	case bytes.HasPrefix(data, beginHead):
		return decode.BoundaryBegin
	case bytes.HasPrefix(data, commitHead):
		return decode.BoundaryCommit
	}
	return decode.BoundaryNone
}

// wireColumn is one element of "columns" or "identity".
type wireColumn struct {
	Name    string          `json:"name"`
	TypeOID wireOID         `json:"typeoid"`
	Value   json.RawMessage `json:"value"`
}

// wirePK is one element of "pk".
type wirePK struct {
	Name    string  `json:"name"`
	TypeOID wireOID `json:"typeoid"`
}

// wireOID is a type OID as wal2json prints it: version 2.5 with "%d", so an OID
// past 2^31 arrives negative and its two's complement is the OID (scanner.oid is
// the fast path's reading).
type wireOID uint32

func (o *wireOID) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < math.MinInt32 || n > math.MaxUint32 {
		return fmt.Errorf("typeoid %.20q is not an OID", b)
	}
	*o = wireOID(uint32(n))
	return nil
}

// document is one format-2 document, every field the options produce.
type document struct {
	Action        string          `json:"action"`
	Xid           *uint32         `json:"xid"`
	Timestamp     *string         `json:"timestamp"`
	LSN           *string         `json:"lsn"`
	NextLSN       *string         `json:"nextlsn"`
	Schema        *string         `json:"schema"`
	Table         *string         `json:"table"`
	Columns       []wireColumn    `json:"columns"`
	Identity      []wireColumn    `json:"identity"`
	PK            []wirePK        `json:"pk"`
	Transactional *bool           `json:"transactional"`
	Prefix        *string         `json:"prefix"`
	Content       json.RawMessage `json:"content"`
}

func malformed(lsn pglogrepl.LSN, detail string) error {
	return decode.NewError(decode.ClassMalformed, lsn, detail)
}

// Decode decodes one document into zero or more messages: zero for a B
// (held until its transaction's first change), for a C that closes a
// transaction without changes, and for a change of a relation not yet in the
// registry generation in effect.
func (s *session) Decode(walStart pglogrepl.LSN, data []byte) ([]decode.Message, error) {
	msgs, err := s.decode(walStart, data)
	if err != nil && s.inTxn && s.pending != nil {
		// The transaction's Begin may still be held back (open): the runner then
		// knows nothing of the transaction, and would quarantine the change's LSN,
		// which no retry of the transaction ever resolves.
		var derr *decode.Error
		if errors.As(err, &derr) && derr.CommitLSN == 0 {
			derr.CommitLSN = s.pending.FinalLSN
		}
	}
	return msgs, err
}

func (s *session) decode(walStart pglogrepl.LSN, data []byte) ([]decode.Message, error) {
	if len(data) == 0 {
		return nil, malformed(walStart, "empty payload")
	}
	if !utf8.Valid(data) {
		// Row values are text in the server encoding (UTF-8) and bytea is hex:
		// only a logical message's content can hold other bytes, which wal2json
		// copies verbatim (up to the first NUL byte). Such content is never the
		// pack's (its messages are UTF-8 text), and pgoutput delivers it to the
		// collator, which ignores what does not parse: so does this decoder,
		// with the invalid bytes replaced, rather than refuse the document and
		// let anyone who may emit a message block the stream.
		if !bytes.HasPrefix(data, messageHead) {
			return nil, malformed(walStart, "document is not valid utf-8")
		}
		data = bytes.ToValidUTF8(data, []byte("\uFFFD"))
	}
	d, ok := parseFast(data)
	if !ok {
		var err error
		if d, err = parseStrict(walStart, data); err != nil {
			return nil, err
		}
	}
	switch d.Action {
	case "B":
		return s.begin(walStart, &d)
	case "C":
		return s.commit(walStart, &d)
	case "I", "U", "D":
		return s.row(walStart, &d)
	case "T":
		return s.truncate(walStart, &d)
	case "M":
		return s.message(walStart, &d)
	}
	return nil, decode.NewError(decode.ClassUnsupportedMessage, walStart, "unknown wal2json action")
}

// parseLSN reads an LSN exactly as wal2json writes it (%X/%X: uppercase hex).
func parseLSN(s *string) (pglogrepl.LSN, bool) {
	if s == nil {
		return 0, false
	}
	hi, lo, ok := strings.Cut(*s, "/")
	if !ok || !upperHex(hi) || !upperHex(lo) {
		return 0, false
	}
	l, err := pglogrepl.ParseLSN(*s)
	return l, err == nil
}

// timestampLayouts are timestamptz_to_str's ISO forms (the offset as +hh,
// +hh:mm or +hh:mm:ss, the fraction trimmed).
var timestampLayouts = []string{
	"2006-01-02 15:04:05.999999-07",
	"2006-01-02 15:04:05.999999-07:00",
	"2006-01-02 15:04:05.999999-07:00:00",
}

func parseTimestamp(s *string) (time.Time, bool) {
	if s == nil {
		return time.Time{}, false
	}
	// The layout by the offset's form, so that one parse decides.
	v := *s
	layout := ""
	if i := strings.LastIndexAny(v, "+-"); i >= 19 {
		switch len(v) - i {
		case 3:
			layout = timestampLayouts[0]
		case 6:
			layout = timestampLayouts[1]
		case 9:
			layout = timestampLayouts[2]
		}
	}
	if layout == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(layout, v)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

func (s *session) begin(walStart pglogrepl.LSN, d *document) ([]decode.Message, error) {
	if s.inTxn {
		return nil, decode.NewError(decode.ClassTransactionFraming, walStart, "begin inside a transaction")
	}
	final, ok := parseLSN(d.LSN)
	if !ok {
		return nil, malformed(walStart, "begin without the commit lsn")
	}
	next, ok := parseLSN(d.NextLSN)
	if !ok {
		return nil, malformed(walStart, "begin without the end lsn")
	}
	ts, ok := parseTimestamp(d.Timestamp)
	if !ok || d.Xid == nil {
		return nil, malformed(walStart, "begin without xid or timestamp")
	}
	s.pending = &decode.Begin{FinalLSN: final, CommitTime: ts, Xid: *d.Xid}
	s.beginEnd, s.lastChange = next, 0
	s.inTxn, s.emitted = true, false
	return nil, nil
}

func (s *session) commit(walStart pglogrepl.LSN, d *document) ([]decode.Message, error) {
	if !s.inTxn {
		return nil, decode.NewError(decode.ClassTransactionFraming, walStart, "commit outside a transaction")
	}
	commitLSN, ok := parseLSN(d.LSN)
	if !ok {
		return nil, malformed(walStart, "commit without the commit lsn")
	}
	end, ok := parseLSN(d.NextLSN)
	if !ok {
		return nil, malformed(walStart, "commit without the end lsn")
	}
	ts, ok := parseTimestamp(d.Timestamp)
	if !ok {
		return nil, malformed(walStart, "commit without timestamp")
	}
	// B and C of one transaction carry the same commit LSN, end LSN, xid and time.
	if commitLSN != s.pending.FinalLSN || end != s.beginEnd || d.Xid == nil || *d.Xid != s.pending.Xid ||
		!ts.Equal(s.pending.CommitTime) {
		return nil, decode.NewError(decode.ClassTransactionFraming, walStart, "commit differs from its begin")
	}
	emitted := s.emitted
	s.inTxn, s.emitted, s.pending = false, false, nil
	if !emitted {
		return nil, nil // nothing of the table set changed: pgoutput sends nothing either
	}
	return []decode.Message{&decode.Commit{CommitLSN: commitLSN, EndLSN: end, CommitTime: ts}}, nil
}

// open returns out with the held Begin prepended, once per transaction.
func (s *session) open(out []decode.Message) []decode.Message {
	if s.inTxn && !s.emitted {
		s.emitted = true
		out = append(out, s.pending)
	}
	return out
}

// inTxnDoc checks that a change belongs to the open transaction: its xid and
// timestamp are the Begin's.
func (s *session) inTxnDoc(walStart pglogrepl.LSN, d *document) error {
	if !s.inTxn {
		return decode.NewError(decode.ClassTransactionFraming, walStart, "change outside a transaction")
	}
	ts, ok := parseTimestamp(d.Timestamp)
	if d.Xid == nil || *d.Xid != s.pending.Xid || !ok || !ts.Equal(s.pending.CommitTime) {
		return decode.NewError(decode.ClassTransactionFraming, walStart, "change of another transaction")
	}
	return nil
}

// changeLSN checks a change's own lsn: present, not before the transaction's
// previous change, before its commit record. Rows carry no LSN downstream (as
// pgoutput's do not); the order check keeps a tampered one from passing. Several
// changes share one lsn when one WAL record holds them: the rows of a COPY or of
// another multi-insert (heap_multi_insert), the tables of one TRUNCATE.
func (s *session) changeLSN(walStart pglogrepl.LSN, d *document) error {
	l, ok := parseLSN(d.LSN)
	if !ok {
		return malformed(walStart, "change without lsn")
	}
	if l == 0 || l < s.lastChange || l >= s.pending.FinalLSN {
		return decode.NewError(decode.ClassTransactionFraming, walStart, "change lsn out of transaction order")
	}
	s.lastChange = l
	return nil
}

func (s *session) relation(walStart pglogrepl.LSN, d *document) (*relState, error) {
	if d.Schema == nil || d.Table == nil {
		return nil, malformed(walStart, "change without schema or table")
	}
	st, ok := s.rels[relKey{*d.Schema, *d.Table}]
	if !ok {
		return nil, decode.NewError(decode.ClassUnknownRelation, walStart, "change of a table outside the session's table set")
	}
	return st, nil
}

// published reports whether the relation's changes are decoded at this
// position: while a generation that registers it is in effect, as the
// publication pgoutput reads holds it only then (activate_registry sets the
// publication's tables). A relation a later activation unregistered is the
// application's own table again: its writes, which no fence follows, never reach
// the stream.
func (s *session) published(st *relState) bool {
	if st.gens == nil {
		return st.firstGen <= s.curGen
	}
	_, ok := slices.BinarySearch(st.gens, s.curGen)
	return ok
}

func (s *session) row(walStart pglogrepl.LSN, d *document) ([]decode.Message, error) {
	if err := s.inTxnDoc(walStart, d); err != nil {
		return nil, err
	}
	if err := s.changeLSN(walStart, d); err != nil {
		return nil, err
	}
	st, err := s.relation(walStart, d)
	if err != nil {
		return nil, err
	}
	if !s.published(st) {
		return nil, nil
	}
	if s.curGen <= st.nonRepUntil {
		return nil, notRepresentableErr(st.rel.OID, s.pending.FinalLSN)
	}
	out := s.open(make([]decode.Message, 0, 3)) // Begin, Relation, Row: pgoutput's order
	row := &decode.Row{}
	switch d.Action {
	case "I":
		row.Op = decode.OpInsert
		if d.Identity != nil {
			return nil, malformed(walStart, "insert with identity")
		}
		if !st.matches(d.Columns, false) || !st.pkMatches(d.PK) {
			out = s.reshape(out, st, d, false)
		}
		if row.New, err = st.tuple(walStart, decode.TupleNew, d.Columns, false); err != nil {
			return nil, err
		}
	case "U":
		row.Op = decode.OpUpdate
		if !st.matches(d.Columns, true) || !st.identityMatches(d.Identity) || !st.pkMatches(d.PK) {
			out = s.reshape(out, st, d, true)
		}
		if row.New, err = st.tuple(walStart, decode.TupleNew, d.Columns, true); err != nil {
			return nil, err
		}
		// pgoutput sends the old key only when the key changed.
		if changed, err := st.keyChanged(walStart, d.Identity, row.New); err != nil {
			return nil, err
		} else if changed {
			if row.Old, err = st.identityTuple(walStart, d.Identity); err != nil {
				return nil, err
			}
		}
	case "D":
		row.Op = decode.OpDelete
		if d.Columns != nil {
			return nil, malformed(walStart, "delete with columns")
		}
		if !st.identityMatches(d.Identity) || !st.pkMatches(d.PK) {
			out = s.reshape(out, st, d, true)
		}
		if row.Old, err = st.identityTuple(walStart, d.Identity); err != nil {
			return nil, err
		}
	}
	row.Relation = st.rel
	return append(out, row), nil
}

// matches reports whether cols fits the current shape: the same columns in
// order with the same types; an update may omit a varlena column (an
// unchanged TOAST value).
func (st *relState) matches(cols []wireColumn, update bool) bool {
	j := 0
	for _, c := range st.rel.Columns {
		if j < len(cols) && cols[j].Name == c.Name {
			if uint32(cols[j].TypeOID) != c.TypeOID {
				return false
			}
			j++
			continue
		}
		if !update || st.typlen[c.Name] != -1 {
			return false // an insert carries every live column; a fixed-width one is never TOASTed
		}
	}
	return j == len(cols)
}

// identityMatches reports whether an identity list names exactly the key
// columns of the current shape (REPLICA IDENTITY DEFAULT: the primary key).
func (st *relState) identityMatches(id []wireColumn) bool {
	if id == nil {
		return true // an update of a table whose identity wal2json did not send
	}
	j := 0
	for _, c := range st.rel.Columns {
		if !c.Key {
			continue
		}
		if j >= len(id) || id[j].Name != c.Name || uint32(id[j].TypeOID) != c.TypeOID {
			return false
		}
		j++
	}
	return j == len(id)
}

// pkMatches reports whether a pk list (include-pk: the primary key's columns)
// names the key columns of the current shape (REPLICA IDENTITY DEFAULT).
func (st *relState) pkMatches(pk []wirePK) bool {
	if pk == nil {
		return true
	}
	j := 0
	for _, c := range st.rel.Columns {
		if !c.Key {
			continue
		}
		if j >= len(pk) || pk[j].Name != c.Name || uint32(pk[j].TypeOID) != c.TypeOID {
			return false
		}
		j++
	}
	return j == len(pk)
}

// reshape emits a new shape of the relation built from the change: the
// columns it carries (an update keeps the varlena columns it omits, in
// place), keys from its identity list, or from pk, or from the old shape. The
// replica identity becomes FULL when the identity list carries every column,
// USING INDEX when it names other columns than the key.
func (s *session) reshape(out []decode.Message, st *relState, d *document, update bool) []decode.Message {
	old := st.rel
	byName := make(map[string]decode.Column, len(old.Columns))
	for _, c := range old.Columns {
		byName[c.Name] = c
	}
	keys := make(map[string]bool)
	switch {
	case d.Identity != nil:
		for _, c := range d.Identity {
			keys[c.Name] = true
		}
	case d.PK != nil:
		for _, c := range d.PK {
			keys[c.Name] = true
		}
	default:
		for _, c := range old.Columns {
			if c.Key {
				keys[c.Name] = true
			}
		}
	}
	rel := &decode.Relation{OID: old.OID, Namespace: old.Namespace, Name: old.Name, ReplicaIdentity: old.ReplicaIdentity}
	add := func(name string, typ uint32) {
		mod := int32(-1)
		if c, ok := byName[name]; ok && c.TypeOID == typ {
			mod = c.TypeMod
		}
		rel.Columns = append(rel.Columns, decode.Column{Name: name, TypeOID: typ, TypeMod: mod, Key: keys[name]})
	}
	switch {
	case d.Columns == nil: // a delete: its identity is all it shows
		for _, c := range old.Columns {
			add(c.Name, c.TypeOID)
		}
		if len(d.Identity) == len(old.Columns) && len(old.Columns) > 0 {
			rel.ReplicaIdentity = decode.ReplicaIdentityFull
		}
	default:
		wire := make(map[string]bool, len(d.Columns))
		for _, c := range d.Columns {
			wire[c.Name] = true
		}
		j := 0
		for _, c := range old.Columns {
			if wire[c.Name] {
				for j < len(d.Columns) && d.Columns[j].Name != c.Name {
					if _, known := byName[d.Columns[j].Name]; !known {
						add(d.Columns[j].Name, uint32(d.Columns[j].TypeOID))
					}
					j++
				}
				if j < len(d.Columns) {
					add(d.Columns[j].Name, uint32(d.Columns[j].TypeOID))
					j++
				}
				continue
			}
			if update && st.typlen[c.Name] == -1 {
				add(c.Name, c.TypeOID) // omitted: an unchanged TOAST value
			}
			// else dropped
		}
		for ; j < len(d.Columns); j++ {
			if _, known := byName[d.Columns[j].Name]; !known {
				add(d.Columns[j].Name, uint32(d.Columns[j].TypeOID))
			}
		}
		if d.Identity != nil && len(d.Identity) == len(rel.Columns) && len(rel.Columns) > 1 {
			rel.ReplicaIdentity = decode.ReplicaIdentityFull
		}
	}
	if rel.ReplicaIdentity == decode.ReplicaIdentityDefault && d.Identity != nil {
		for _, c := range old.Columns {
			if c.Key != keys[c.Name] {
				rel.ReplicaIdentity = decode.ReplicaIdentityIndex
				break
			}
		}
	}
	st.rel = rel
	return append(out, rel)
}

// tuple renders cols against the current shape.
func (st *relState) tuple(walStart pglogrepl.LSN, kind decode.TupleKind, cols []wireColumn, update bool) (*decode.Tuple, error) {
	t := &decode.Tuple{Kind: kind, Values: make([]decode.Value, len(st.rel.Columns))}
	j := 0
	for i, c := range st.rel.Columns {
		if j < len(cols) && cols[j].Name == c.Name {
			v, err := value(walStart, cols[j])
			if err != nil {
				return nil, err
			}
			t.Values[i] = v
			j++
			continue
		}
		if update && st.typlen[c.Name] == -1 {
			t.Values[i] = decode.Value{Kind: decode.ValueUnchangedToast}
			continue
		}
		e := decode.NewError(decode.ClassMalformed, walStart, "change columns differ from the relation")
		e.RelationOID = st.rel.OID
		return nil, e
	}
	if j != len(cols) {
		e := decode.NewError(decode.ClassMalformed, walStart, "change columns differ from the relation")
		e.RelationOID = st.rel.OID
		return nil, e
	}
	return t, nil
}

// identityTuple renders an identity list as pgoutput's key-only old image:
// the key columns set, every other column null.
func (st *relState) identityTuple(walStart pglogrepl.LSN, id []wireColumn) (*decode.Tuple, error) {
	if len(id) == 0 {
		e := decode.NewError(decode.ClassMalformed, walStart, "change without the old key")
		e.RelationOID = st.rel.OID
		return nil, e
	}
	kind := decode.TupleKey
	if st.rel.ReplicaIdentity == decode.ReplicaIdentityFull {
		kind = decode.TupleOld
	}
	t := &decode.Tuple{Kind: kind, Values: make([]decode.Value, len(st.rel.Columns))}
	j := 0
	for i, c := range st.rel.Columns {
		if j < len(id) && id[j].Name == c.Name {
			v, err := value(walStart, id[j])
			if err != nil {
				return nil, err
			}
			t.Values[i] = v
			j++
			continue
		}
		t.Values[i] = decode.Value{Kind: decode.ValueNull}
	}
	if j != len(id) {
		e := decode.NewError(decode.ClassMalformed, walStart, "identity columns differ from the relation")
		e.RelationOID = st.rel.OID
		return nil, e
	}
	return t, nil
}

// keyChanged reports whether an update's identity (the old key) differs from
// its new image's key columns.
func (st *relState) keyChanged(walStart pglogrepl.LSN, id []wireColumn, newT *decode.Tuple) (bool, error) {
	if id == nil {
		return false, nil
	}
	j := 0
	for i, c := range st.rel.Columns {
		if j >= len(id) || id[j].Name != c.Name {
			continue
		}
		v, err := value(walStart, id[j])
		if err != nil {
			return false, err
		}
		nv := newT.Values[i]
		if v.Kind != nv.Kind || !bytes.Equal(v.Data, nv.Data) {
			return true, nil
		}
		j++
	}
	return false, nil
}

// value turns one wire value into pgoutput's text form.
func value(walStart pglogrepl.LSN, c wireColumn) (decode.Value, error) {
	raw := c.Value
	if len(raw) == 0 {
		return decode.Value{}, malformed(walStart, "column without value")
	}
	switch raw[0] {
	case 'n':
		if string(raw) != "null" {
			break
		}
		return decode.Value{Kind: decode.ValueNull}, nil
	case 't', 'f':
		if c.TypeOID != oidBool {
			break
		}
		switch string(raw) {
		case "true":
			return decode.Value{Kind: decode.ValueText, Data: []byte("t")}, nil
		case "false":
			return decode.Value{Kind: decode.ValueText, Data: []byte("f")}, nil
		}
	case '"':
		s, ok := unquote(raw)
		if !ok {
			break
		}
		if c.TypeOID == oidBytea {
			// wal2json strips byteaout's "\x"; only hex output can be restored.
			if len(s)%2 != 0 || !isHex(s) {
				return decode.Value{}, malformed(walStart, "bytea value is not hex (bytea_output must be hex)")
			}
			return decode.Value{Kind: decode.ValueText, Data: append([]byte(`\x`), s...)}, nil
		}
		return decode.Value{Kind: decode.ValueText, Data: []byte(s)}, nil
	default:
		switch c.TypeOID {
		case oidInt2, oidInt4, oidInt8, oidOID, oidFloat4, oidFloat8, oidNumeric:
			if !isNumber(raw) {
				break
			}
			// The literal text the type's output function wrote, verbatim.
			return decode.Value{Kind: decode.ValueText, Data: bytes.Clone(raw)}, nil
		}
	}
	return decode.Value{}, malformed(walStart, "column value does not fit its type")
}

func upperHex(s string) bool {
	if len(s) == 0 || len(s) > 8 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// unquote returns the value of a JSON string literal: its bytes when it holds
// no escape, else what encoding/json makes of it.
func unquote(raw []byte) (string, bool) {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		inner := raw[1 : len(raw)-1]
		if bytes.IndexByte(inner, '\\') < 0 && bytes.IndexByte(inner, '"') < 0 && !hasControl(inner) {
			return string(inner), true
		}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// isNumber reports whether raw is exactly one JSON number literal:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isNumber(raw []byte) bool {
	i, n := 0, len(raw)
	if i < n && raw[i] == '-' {
		i++
	}
	digits := func() int {
		start := i
		for i < n && raw[i] >= '0' && raw[i] <= '9' {
			i++
		}
		return i - start
	}
	switch {
	case i < n && raw[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < n && raw[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < n && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < n && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == n
}

func (s *session) truncate(walStart pglogrepl.LSN, d *document) ([]decode.Message, error) {
	if err := s.inTxnDoc(walStart, d); err != nil {
		return nil, err
	}
	if err := s.changeLSN(walStart, d); err != nil {
		return nil, err
	}
	st, err := s.relation(walStart, d)
	if err != nil {
		return nil, err
	}
	if !s.published(st) {
		return nil, nil
	}
	// wal2json sends one T per relation and no options (cascade, restart
	// identity): materialization needs neither.
	return append(s.open(nil), &decode.Truncate{Relations: []*decode.Relation{st.rel}}), nil
}

func (s *session) message(walStart pglogrepl.LSN, d *document) ([]decode.Message, error) {
	lsn, ok := parseLSN(d.LSN)
	if !ok {
		return nil, malformed(walStart, "message without lsn")
	}
	if d.Transactional == nil || d.Prefix == nil || d.Content == nil {
		return nil, malformed(walStart, "message without transactional, prefix or content")
	}
	var content string
	if err := json.Unmarshal(d.Content, &content); err != nil {
		return nil, malformed(walStart, "message content is not a string")
	}
	m := &decode.LogicalMessage{Transactional: *d.Transactional, LSN: lsn, Prefix: *d.Prefix, Content: []byte(content)}
	if !m.Transactional {
		if d.Xid != nil || d.Timestamp != nil {
			return nil, malformed(walStart, "non-transactional message with xid or timestamp")
		}
		return []decode.Message{m}, nil
	}
	if err := s.inTxnDoc(walStart, d); err != nil {
		return nil, err
	}
	if m.Prefix == decode.PrefixRegistry {
		// Only the pack's own activations move the session (SessionSpec.Authentic):
		// two forged ones of a future generation in one transaction ended every
		// session in turn (the runner skips one position), and a forged one of the
		// next generation made changes of a relation decoded before it was
		// registered (TestRunnerForgedActivationsIgnored).
		if a, err := decode.ParseRegistryActivation(m.Content); err == nil && s.authentic != nil && s.authentic(&a) {
			if err := s.activation(walStart, lsn, a); err != nil {
				return nil, err
			}
		}
	}
	return append(s.open(nil), m), nil
}

// activation follows a registry activation in the stream: later changes use
// its generation's table set. An activation of a generation this session's
// table set predates ends the session before its transaction is materialized
// (table_set_changed, transient): the next session reads the table set again.
// A message that is not a genuine activation (anyone can emit one) ends at
// most one session: the runner passes its position back as RestartedAt.
func (s *session) activation(walStart, lsn pglogrepl.LSN, a decode.Activation) error {
	if a.Generation > s.latest {
		if lsn == s.skipLSN {
			return nil
		}
		return decode.NewError(decode.ClassTableSetChanged, lsn, "registry activation of a generation the session's table set predates")
	}
	prev := int64(0)
	if a.Previous != nil {
		prev = *a.Previous
	}
	if prev == s.curGen && a.Generation > s.curGen {
		s.curGen = a.Generation
	}
	return nil
}

// parseStrict is the general strict parser, and the reference the fast path
// is proven against.
func parseStrict(walStart pglogrepl.LSN, data []byte) (document, error) {
	if !exactKeys(data) {
		return document{}, malformed(walStart, "document has an unknown or repeated field")
	}
	var d document
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return document{}, malformed(walStart, "document is not a wal2json format 2 object")
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return document{}, malformed(walStart, "trailing content after document")
	}
	return d, nil
}

// knownKeys are every field name of a format-2 document, its columns and its
// pk entries, spelled exactly: encoding/json matches names case-insensitively
// and keeps the last of repeated ones, so exactKeys checks them first.
var knownKeys = map[string]bool{
	"action": true, "xid": true, "timestamp": true, "lsn": true, "nextlsn": true, "schema": true,
	"table": true, "columns": true, "identity": true, "pk": true, "transactional": true, "prefix": true,
	"content": true, "name": true, "typeoid": true, "value": true,
}

// exactKeys reports whether every object key in data is a known key, spelled
// exactly, and unique in its object.
func exactKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		object bool
		seen   map[string]bool
		key    bool // the next token of this object is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return len(stack) == 0 // io.EOF after a complete value; the decoder judges the rest
		}
		if n := len(stack); n > 0 && stack[n-1].object {
			top := &stack[n-1]
			if top.key {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:n-1]
					continue
				}
				k, ok := tok.(string)
				if !ok || !knownKeys[k] || top.seen[k] {
					return false
				}
				top.seen[k] = true
				top.key = false
				continue
			}
			top.key = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, seen: make(map[string]bool, 8), key: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim(']'):
			if len(stack) == 0 {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
}
