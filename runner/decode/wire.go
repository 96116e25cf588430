package decode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Prefixes of Synchro's logical messages (docs/wire-format.md).
const (
	// PrefixNamespace starts every Synchro prefix. Anyone can emit a message
	// with it (pg_logical_emit_message is executable by PUBLIC): one that is not
	// a well-formed, authenticated message of a known prefix is ignored and
	// counted, never poison (docs/wire-format.md).
	PrefixNamespace = "synchro."
	PrefixFence     = "synchro.fence"
	PrefixRegistry  = "synchro.registry"
)

// WireFormatVersion is the only accepted "v" of a JSON message: every
// synchro.registry message, and a synchro.fence message written before issue 7
// (fences are now wire format 3, compactwire.go). Version 2 added "mac".
const WireFormatVersion = 2

// MaxMessageContent bounds the content of a Synchro message worth parsing. The
// pack's own are far smaller (a fence carries keys of at most 1024 bytes and
// names of at most 63); a larger one is someone else's and is dropped unparsed.
const MaxMessageContent = 64 << 10

// MACHexLen is the length of a message's "mac": 16 bytes as lowercase hex. The
// runner cannot check it (the server key never leaves the database);
// materialization does, and drops a message whose MAC does not match.
const MACHexLen = 32

// FenceKind is a registration kind.
type FenceKind string

// Registration kinds.
const (
	FenceSynced            FenceKind = "synced"
	FenceCaptureDependency FenceKind = "capture_dependency"
)

// FenceOp is a fenced row operation.
type FenceOp string

// Fenced operations.
const (
	FenceInsert FenceOp = "insert"
	FenceUpdate FenceOp = "update"
	FenceDelete FenceOp = "delete"
)

// Op returns the matching row Op.
func (o FenceOp) Op() Op {
	switch o {
	case FenceInsert:
		return OpInsert
	case FenceUpdate:
		return OpUpdate
	case FenceDelete:
		return OpDelete
	}
	return 0
}

// PrimaryKey is a synced fence's typed primary key: a JSON number (int, int64
// keys) or a JSON string (string keys).
type PrimaryKey struct {
	IsInt bool
	Int   int64  // when IsInt
	Str   string // when !IsInt
}

// Text is the key's canonical text (decimal digits for an integer).
func (k PrimaryKey) Text() string {
	if k.IsInt {
		return strconv.FormatInt(k.Int, 10)
	}
	return k.Str
}

// Fence is one parsed synchro.fence message.
type Fence struct {
	Kind       FenceKind
	RelationID int64
	Schema     string
	Table      string
	Op         FenceOp
	OldKey     *string // nil for insert
	NewKey     *string // nil for delete
	Version    string
	FenceID    string // canonical lowercase UUID
	Ordinal    int64
	TableID    string      // synced only
	PK         *PrimaryKey // synced only
	CaptureKey string      // capture_dependency only
	MAC        string      // lowercase hex, MACHexLen long; unverified here
	// Format is the wire format the fence came in: 2 (JSON) or 3 (compact,
	// compactwire.go). Signed is, for format 3, the text its MAC covers (the
	// content before the MAC); format 2's MAC covers a body rebuilt from the
	// fields (runner/msgauth).
	Format int
	Signed string
}

// Key returns the registered key identity of the fenced row: NewKey, or
// OldKey for a delete.
func (f *Fence) Key() string {
	if f.NewKey != nil {
		return *f.NewKey
	}
	if f.OldKey != nil {
		return *f.OldKey
	}
	return ""
}

// String redacts keys, version and primary key.
func (f *Fence) String() string {
	return fmt.Sprintf("fence(%s relation_id=%d op=%s ordinal=%d fence_id=%s)",
		f.Kind, f.RelationID, f.Op, f.Ordinal, f.FenceID)
}

// LogValue redacts keys, version and primary key.
func (f *Fence) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("kind", string(f.Kind)),
		slog.Int64("relation_id", f.RelationID),
		slog.String("op", string(f.Op)),
		slog.Int64("ordinal", f.Ordinal),
		slog.String("fence_id", f.FenceID),
	)
}

// Activation is one parsed synchro.registry message.
type Activation struct {
	Generation int64
	Previous   *int64 // nil for the first generation
	MAC        string // lowercase hex, MACHexLen long; unverified here
}

type fenceWire struct {
	V          json.RawMessage `json:"v"`
	Kind       json.RawMessage `json:"kind"`
	RelationID json.RawMessage `json:"relation_id"`
	Schema     json.RawMessage `json:"schema"`
	Table      json.RawMessage `json:"table"`
	Op         json.RawMessage `json:"op"`
	OldKey     json.RawMessage `json:"old_key"`
	NewKey     json.RawMessage `json:"new_key"`
	Version    json.RawMessage `json:"version"`
	FenceID    json.RawMessage `json:"fence_id"`
	Ordinal    json.RawMessage `json:"ordinal"`
	TableID    json.RawMessage `json:"table_id"`
	PK         json.RawMessage `json:"pk"`
	CaptureKey json.RawMessage `json:"capture_key"`
	MAC        json.RawMessage `json:"mac"`
}

type activationWire struct {
	V          json.RawMessage `json:"v"`
	Generation json.RawMessage `json:"generation"`
	Previous   json.RawMessage `json:"previous"`
	MAC        json.RawMessage `json:"mac"`
}

func formatErr(detail string) *Error { return newErr(ClassMessageFormat, 0, detail) }

// ParseFence parses a synchro.fence message content strictly. Any deviation
// from docs/wire-format.md is an *Error of class message_format.
//
// Two wire formats are accepted: 3, the compact one the fence triggers write
// since issue 7 (compactwire.go; it starts with "1:3"), and 2, the JSON object
// of earlier releases, still in the WAL written before an upgrade.
//
// The pack's own fences take a fast path (fastwire.go) that accepts only the
// exact text PostgreSQL's json_build_object writes and yields the same Fence;
// anything else, malformed content included, goes through the general strict
// parser, which alone decides errors. The accepted language is the strict
// parser's.
func ParseFence(content []byte) (Fence, error) {
	if hasPrefix(content, compactHead) {
		return parseFenceCompact(content)
	}
	if f, ok := parseFenceFast(content); ok {
		return f, nil
	}
	return parseFenceStrict(content)
}

// parseFenceStrict is the general strict parser, and the reference the fast
// path is proven against (fastwire_test.go, FuzzFenceFastPath).
func parseFenceStrict(content []byte) (Fence, error) {
	var w fenceWire
	if err := strictUnmarshal(content, &w); err != nil {
		return Fence{}, err
	}
	if err := checkVersion(w.V); err != nil {
		return Fence{}, err
	}
	var f Fence
	var err error
	var s string
	if s, err = reqString(w.Kind, "fence kind"); err != nil {
		return Fence{}, err
	}
	f.Kind = FenceKind(s)
	if f.Kind != FenceSynced && f.Kind != FenceCaptureDependency {
		return Fence{}, formatErr("fence kind is not synced or capture_dependency")
	}
	if f.RelationID, err = reqInt(w.RelationID, "fence relation_id"); err != nil {
		return Fence{}, err
	}
	if f.RelationID <= 0 {
		return Fence{}, formatErr("fence relation_id is not positive")
	}
	if f.Schema, err = reqNonEmpty(w.Schema, "fence schema"); err != nil {
		return Fence{}, err
	}
	if f.Table, err = reqNonEmpty(w.Table, "fence table"); err != nil {
		return Fence{}, err
	}
	if s, err = reqString(w.Op, "fence op"); err != nil {
		return Fence{}, err
	}
	f.Op = FenceOp(s)
	if f.Op.Op() == 0 {
		return Fence{}, formatErr("fence op is not insert, update or delete")
	}
	if f.OldKey, err = reqNullableString(w.OldKey, "fence old_key"); err != nil {
		return Fence{}, err
	}
	if f.NewKey, err = reqNullableString(w.NewKey, "fence new_key"); err != nil {
		return Fence{}, err
	}
	switch f.Op {
	case FenceInsert:
		if f.OldKey != nil || f.NewKey == nil {
			return Fence{}, formatErr("insert fence needs old_key null and new_key set")
		}
	case FenceDelete:
		if f.NewKey != nil || f.OldKey == nil {
			return Fence{}, formatErr("delete fence needs new_key null and old_key set")
		}
	case FenceUpdate:
		if f.OldKey == nil || f.NewKey == nil || *f.OldKey != *f.NewKey {
			return Fence{}, formatErr("update fence needs equal old_key and new_key")
		}
	}
	if f.Version, err = reqNonEmpty(w.Version, "fence version"); err != nil {
		return Fence{}, err
	}
	if f.FenceID, err = reqString(w.FenceID, "fence fence_id"); err != nil {
		return Fence{}, err
	}
	if !canonicalUUID(f.FenceID) {
		return Fence{}, formatErr("fence fence_id is not a canonical lowercase uuid")
	}
	if f.Ordinal, err = reqInt(w.Ordinal, "fence ordinal"); err != nil {
		return Fence{}, err
	}
	switch f.Kind {
	case FenceSynced:
		if w.CaptureKey != nil {
			return Fence{}, formatErr("synced fence carries capture_key")
		}
		if f.TableID, err = reqNonEmpty(w.TableID, "fence table_id"); err != nil {
			return Fence{}, err
		}
		pk, err := reqPK(w.PK)
		if err != nil {
			return Fence{}, err
		}
		if pk.Text() != f.Key() {
			return Fence{}, formatErr("synced fence pk differs from its registered key")
		}
		f.PK = &pk
	case FenceCaptureDependency:
		if w.TableID != nil || w.PK != nil {
			return Fence{}, formatErr("capture_dependency fence carries table_id or pk")
		}
		if f.CaptureKey, err = reqString(w.CaptureKey, "fence capture_key"); err != nil {
			return Fence{}, err
		}
	}
	if f.MAC, err = reqMAC(w.MAC, "fence mac"); err != nil {
		return Fence{}, err
	}
	f.Format = 2
	return f, nil
}

// ParseRegistryActivation parses a synchro.registry message content strictly.
// Any deviation is an *Error of class message_format. Like [ParseFence], the
// exact jsonb text activate_registry() writes takes a fast path with the same
// result; anything else goes through the strict parser.
func ParseRegistryActivation(content []byte) (Activation, error) {
	if a, ok := parseActivationFast(content); ok {
		return a, nil
	}
	return parseActivationStrict(content)
}

// parseActivationStrict is the general strict parser, and the reference the
// fast path is proven against.
func parseActivationStrict(content []byte) (Activation, error) {
	var w activationWire
	if err := strictUnmarshal(content, &w); err != nil {
		return Activation{}, err
	}
	if err := checkVersion(w.V); err != nil {
		return Activation{}, err
	}
	var a Activation
	var err error
	if a.Generation, err = reqInt(w.Generation, "registry generation"); err != nil {
		return Activation{}, err
	}
	if a.Generation <= 0 {
		return Activation{}, formatErr("registry generation is not positive")
	}
	if w.Previous == nil {
		return Activation{}, formatErr("registry previous is missing")
	}
	if !isNull(w.Previous) {
		p, err := reqInt(w.Previous, "registry previous")
		if err != nil {
			return Activation{}, err
		}
		if p <= 0 || p >= a.Generation {
			return Activation{}, formatErr("registry previous is not a positive generation below generation")
		}
		a.Previous = &p
	}
	if a.MAC, err = reqMAC(w.MAC, "registry mac"); err != nil {
		return Activation{}, err
	}
	return a, nil
}

// strictUnmarshal decodes exactly one JSON object with no unknown, duplicate
// or trailing content, from valid UTF-8, that jsonb also accepts.
func strictUnmarshal(content []byte, v any) error {
	if !utf8.Valid(content) {
		return formatErr("content is not valid utf-8")
	}
	if !jsonbEscapes(content) {
		return formatErr("content has an escape jsonb refuses")
	}
	if err := checkObjectKeys(content); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// The json error text can quote input; it is dropped.
		return formatErr("content is not a json object of known fields")
	}
	if _, err := dec.Token(); err != io.EOF {
		return formatErr("trailing content after json object")
	}
	return nil
}

// jsonbEscapes reports whether every \u escape in content's strings is one
// PostgreSQL's jsonb accepts: not \u0000 (text cannot hold NUL) and no UTF-16
// surrogate (encoding/json replaces an unpaired one, jsonb refuses it; the pack
// never writes one, PostgreSQL's JSON output escapes only control characters). A
// message is staged into a jsonb column, so one jsonb refuses must be dropped
// here, not fail the staging. Structure is left to the decoder.
func jsonbEscapes(content []byte) bool {
	inString := false
	for i := 0; i < len(content); i++ {
		c := content[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(content) {
				return false
			}
			i++
			if content[i] != 'u' {
				continue
			}
			if i+4 >= len(content) {
				return false
			}
			r, err := strconv.ParseUint(string(content[i+1:i+5]), 16, 16)
			if err != nil || r == 0 || (r >= 0xD800 && r <= 0xDFFF) {
				return false
			}
			i += 4
		}
	}
	return true
}

// checkObjectKeys requires content to be a JSON object whose top-level keys
// are unique (encoding/json would silently keep the last duplicate).
func checkObjectKeys(content []byte) error {
	dec := json.NewDecoder(bytes.NewReader(content))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return formatErr("content is not a json object")
	}
	seen := make(map[string]struct{})
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return formatErr("content is not a json object")
		}
		key, ok := tok.(string)
		if !ok {
			return formatErr("content is not a json object")
		}
		if _, dup := seen[key]; dup {
			return formatErr("duplicate field")
		}
		seen[key] = struct{}{}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return formatErr("content is not a json object")
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return formatErr("content is not a json object")
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

func checkVersion(raw json.RawMessage) error {
	v, err := reqInt(raw, "format version")
	if err != nil {
		return err
	}
	if v != WireFormatVersion {
		return formatErr("unknown format version")
	}
	return nil
}

// reqInt reads a required JSON integer literal (no fraction, no exponent)
// within int64.
func reqInt(raw json.RawMessage, field string) (int64, error) {
	if raw == nil {
		return 0, formatErr(field + " is missing")
	}
	n, ok := intLiteral(raw)
	if !ok {
		return 0, formatErr(field + " is not an integer")
	}
	return n, nil
}

func intLiteral(raw json.RawMessage) (int64, bool) {
	s := string(raw)
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func reqString(raw json.RawMessage, field string) (string, error) {
	if raw == nil {
		return "", formatErr(field + " is missing")
	}
	if len(raw) == 0 || raw[0] != '"' {
		return "", formatErr(field + " is not a string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", formatErr(field + " is not a string")
	}
	return s, nil
}

func reqNonEmpty(raw json.RawMessage, field string) (string, error) {
	s, err := reqString(raw, field)
	if err == nil && s == "" {
		err = formatErr(field + " is empty")
	}
	return s, err
}

func reqNullableString(raw json.RawMessage, field string) (*string, error) {
	if raw == nil {
		return nil, formatErr(field + " is missing")
	}
	if isNull(raw) {
		return nil, nil
	}
	s, err := reqString(raw, field)
	if err != nil {
		return nil, formatErr(field + " is not a string or null")
	}
	return &s, nil
}

func reqPK(raw json.RawMessage) (PrimaryKey, error) {
	if raw == nil {
		return PrimaryKey{}, formatErr("fence pk is missing")
	}
	if len(raw) > 0 && raw[0] == '"' {
		s, err := reqString(raw, "fence pk") // '' is a text key like any other
		return PrimaryKey{Str: s}, err
	}
	n, ok := intLiteral(raw)
	if !ok {
		return PrimaryKey{}, formatErr("fence pk is not a string or an integer")
	}
	return PrimaryKey{IsInt: true, Int: n}, nil
}

// reqMAC reads a required MAC: MACHexLen lowercase hex digits.
func reqMAC(raw json.RawMessage, field string) (string, error) {
	s, err := reqString(raw, field)
	if err != nil {
		return "", err
	}
	if len(s) != MACHexLen {
		return "", formatErr(field + " is not " + strconv.Itoa(MACHexLen) + " hex digits")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", formatErr(field + " is not lowercase hex")
		}
	}
	return s, nil
}

// canonicalUUID reports whether s is 8-4-4-4-12 lowercase hex.
func canonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}
