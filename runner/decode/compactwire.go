package decode

import (
	"strconv"
	"unicode/utf8"
)

// Wire format 3 of synchro.fence (issue 7, "fence cost"; docs/wire-format.md).
//
// Format 2 was a JSON object built by json_build_object: fourteen field names
// repeated in every message, every string escaped, and a second rendering of the
// same fields for the MAC body. Format 3 is that MAC body itself: the fields in a
// fixed order, each as <length in characters>:<text>, followed by the MAC, 32
// lowercase hex digits, over everything before it:
//
//	1:3 1:<kind s|c> <relation_id> <schema> <table> 1:<op i|u|d> <key> <version>
//	<fence_id> <ordinal> [synced: <table_id> 1:<pk type n|s>] <mac>
//
// (without the spaces). The key is carried once: it is the new key of an insert,
// the old key of a delete, both of an update (a key change is refused at the
// source), the typed primary key of a synced registration (a JSON number in
// format 2 when the pk type is n, so it must then be a canonical int64) and the
// capture key of a capture_dependency registration. The parser yields the same
// Fence a format-2 message with those values yields, with Format 3 and Signed set
// to the bytes the MAC covers; runner/msgauth verifies it against those.
//
// The parser is strict: any other version, a length that is not a decimal
// without a leading zero, a field cut short, an unknown code, an empty field
// where format 2 refuses an empty string, a non-canonical integer, invalid
// UTF-8, a NUL byte (a PostgreSQL text never holds one), a MAC that is not 32
// lowercase hex digits, or trailing bytes: a message_format error, so the
// collator ignores the message as malformed.

// compactHead starts every format-3 fence: its version field, "1:3". A format-2
// fence starts with '{', and a format-2 MAC body with "1:2", so no format-2 text
// is a format-3 body.
const compactHead = "1:3"

// compactScanner reads <length>:<text> fields from s.
type compactScanner struct {
	s   string
	i   int
	bad bool
}

// field reads one <length>:<text> field; length counts characters (runes).
func (p *compactScanner) field() string {
	if p.bad {
		return ""
	}
	j := p.i
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	// A decimal without a leading zero (a lone 0 is the empty text); a field is
	// never longer than the content.
	if j == p.i || j-p.i > 5 || (j-p.i > 1 && p.s[p.i] == '0') || j >= len(p.s) || p.s[j] != ':' {
		p.bad = true
		return ""
	}
	n, _ := strconv.Atoi(p.s[p.i:j])
	start := j + 1
	k := start
	for c := 0; c < n; c++ {
		if k >= len(p.s) {
			p.bad = true
			return ""
		}
		_, size := utf8.DecodeRuneInString(p.s[k:])
		k += size
	}
	p.i = k
	return p.s[start:k]
}

// canonicalInt parses a decimal int64 in its canonical text: an optional '-',
// digits without a leading zero, "-0" excluded (PostgreSQL prints none).
func canonicalInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return n, true
}

// parseFenceCompact parses a format-3 fence strictly.
func parseFenceCompact(content []byte) (Fence, error) {
	if !utf8.Valid(content) {
		return Fence{}, formatErr("fence is not valid UTF-8")
	}
	for _, c := range content {
		if c == 0 {
			return Fence{}, formatErr("fence holds a NUL byte")
		}
	}
	if len(content) < len(compactHead)+MACHexLen {
		return Fence{}, formatErr("fence is too short")
	}
	s := string(content)
	body, mac := s[:len(s)-MACHexLen], s[len(s)-MACHexLen:]
	if !isMAC(mac) {
		return Fence{}, formatErr("fence mac is not 32 lowercase hex digits")
	}
	p := compactScanner{s: body}
	version := p.field()
	kind := p.field()
	relationID := p.field()
	var f Fence
	f.Schema = p.field()
	f.Table = p.field()
	op := p.field()
	key := p.field()
	f.Version = p.field()
	f.FenceID = p.field()
	ordinal := p.field()
	if p.bad {
		return Fence{}, formatErr("fence field is malformed")
	}
	if version != "3" {
		return Fence{}, formatErr("fence version is not 3")
	}
	switch kind {
	case "s":
		f.Kind = FenceSynced
	case "c":
		f.Kind = FenceCaptureDependency
	default:
		return Fence{}, formatErr("fence kind is not s or c")
	}
	var ok bool
	if f.RelationID, ok = canonicalInt(relationID); !ok || f.RelationID <= 0 {
		return Fence{}, formatErr("fence relation_id is not a positive integer")
	}
	if f.Ordinal, ok = canonicalInt(ordinal); !ok {
		return Fence{}, formatErr("fence ordinal is not an integer")
	}
	// The key may be empty: '' is a text key PostgreSQL accepts, and a value it
	// accepted must never stop the stream. The length prefix makes `0:` unambiguous.
	if f.Schema == "" || f.Table == "" || f.Version == "" {
		return Fence{}, formatErr("fence schema, table or version is empty")
	}
	if !canonicalUUID(f.FenceID) {
		return Fence{}, formatErr("fence fence_id is not a canonical lowercase uuid")
	}
	// One allocation for what the Fence points to (as the format-2 fast path).
	box := &fenceBox{oldKey: key, newKey: key}
	switch op {
	case "i":
		f.Op, f.NewKey = FenceInsert, &box.newKey
	case "u":
		f.Op, f.OldKey, f.NewKey = FenceUpdate, &box.oldKey, &box.newKey
	case "d":
		f.Op, f.OldKey = FenceDelete, &box.oldKey
	default:
		return Fence{}, formatErr("fence op is not i, u or d")
	}
	switch f.Kind {
	case FenceSynced:
		f.TableID = p.field()
		pkType := p.field()
		if p.bad || f.TableID == "" {
			return Fence{}, formatErr("synced fence table_id is malformed or empty")
		}
		switch pkType {
		case "n":
			n, ok := canonicalInt(key)
			if !ok {
				return Fence{}, formatErr("synced fence integer pk is not a canonical integer")
			}
			box.pk = PrimaryKey{IsInt: true, Int: n}
		case "s":
			box.pk = PrimaryKey{Str: key}
		default:
			return Fence{}, formatErr("synced fence pk type is not n or s")
		}
		f.PK = &box.pk
	case FenceCaptureDependency:
		f.CaptureKey = key
	}
	if p.i != len(body) {
		return Fence{}, formatErr("fence has trailing fields")
	}
	f.MAC = mac
	f.Format = 3
	f.Signed = body
	return f, nil
}
