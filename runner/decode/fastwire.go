package decode

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// The fast path for the pack's own messages (issue 7, "per-row cost").
//
// The strict parser (parseFenceStrict) tokenizes the content twice with
// encoding/json and unmarshals every field on its own: tens of µs and 188
// allocations per fence, the largest share of the runner's CPU when it
// materializes single-row transactions. But the pack wrote every format-2
// fence with PostgreSQL's json_build_object(...)::text (the fence template
// before issue 7; such fences stay in WAL written before an upgrade, and the
// fences written since are format 3, compactwire.go), whose text has one fixed
// shape:
//
//	{"v" : 2, "kind" : "synced", "relation_id" : 3, "schema" : "public", ...}
//
// fields in the template's order, `"key" : value` pairs separated by ", ", no
// other whitespace, strings escaped by escape_json (\" \\ \b \f \n \r \t and
// \u00XX for other control characters; everything else, '/' and non-ASCII
// included, verbatim). activate_registry() writes jsonb text, whose shape is
// fixed too (`{"v": 2, "mac": "…", "previous": 1, "generation": 2}`: keys by
// length, then bytes; ": " and ", ").
//
// The scanners below read exactly those shapes and apply every rule of the
// strict parser to the values. They either return the same result as the
// strict parser, or report a miss: other spacing, key order or spelling, an
// escape they do not decode, trailing bytes, any invalid value. A miss falls
// back to the strict parser, which alone produces errors, so the accepted
// language and every result (value or error class) are the strict parser's;
// fastwire_test.go and FuzzFenceFastPath check that equivalence.
//
// Cost of a hit: one copy of the content as a string (every string field is a
// substring of it unless it holds an escape) and one allocation for the keys and
// the primary key the Fence points to.

// The fixed text of json_build_object between the fence's values, in the
// template's order (the kind decides the fields after ordinal).
const (
	fenceHead       = `{"v" : 2, "kind" : `
	fenceRelationID = `, "relation_id" : `
	fenceSchema     = `, "schema" : `
	fenceTable      = `, "table" : `
	fenceOp         = `, "op" : `
	fenceOldKey     = `, "old_key" : `
	fenceNewKey     = `, "new_key" : `
	fenceVersion    = `, "version" : `
	fenceFenceID    = `, "fence_id" : `
	fenceOrdinal    = `, "ordinal" : `
	fenceTableID    = `, "table_id" : `
	fencePK         = `, "pk" : `
	fenceCaptureKey = `, "capture_key" : `
	fenceMAC        = `, "mac" : `
	fastTail        = `}`
)

// The fixed text of the activation's jsonb output between its values.
const (
	activationHead       = `{"v": 2, "mac": `
	activationPrevious   = `, "previous": `
	activationGeneration = `, "generation": `
)

// fastScanner reads one exact layout from s. The first mismatch sets bad;
// every later read is then a no-op returning a zero value, so a caller checks
// bad once, before it trusts any value.
type fastScanner struct {
	s   string
	i   int
	bad bool
}

// lit consumes the literal l.
func (p *fastScanner) lit(l string) {
	if !p.bad && strings.HasPrefix(p.s[p.i:], l) {
		p.i += len(l)
		return
	}
	p.bad = true
}

// end requires the end of the input.
func (p *fastScanner) end() {
	if p.i != len(p.s) {
		p.bad = true
	}
}

// str consumes a JSON string and returns its value: a substring of the input
// when it holds no escape.
func (p *fastScanner) str() string {
	if p.bad || p.i >= len(p.s) || p.s[p.i] != '"' {
		p.bad = true
		return ""
	}
	start := p.i + 1
	for j := start; j < len(p.s); j++ {
		switch c := p.s[j]; {
		case c == '"':
			p.i = j + 1
			return p.s[start:j]
		case c == '\\':
			return p.escaped(start, j)
		case c < 0x20: // a raw control character: not JSON
			p.bad = true
			return ""
		}
	}
	p.bad = true // unterminated
	return ""
}

// escaped finishes the string that started at start and holds an escape at j.
// It decodes the escapes encoding/json decodes, as it does, and misses on
// those the strict parser refuses (\u0000, a UTF-16 surrogate: jsonb refuses
// them) or would have to judge (anything else).
func (p *fastScanner) escaped(start, j int) string {
	b := make([]byte, 0, j-start+16)
	b = append(b, p.s[start:j]...)
	for j < len(p.s) {
		c := p.s[j]
		switch {
		case c == '"':
			p.i = j + 1
			return string(b)
		case c < 0x20:
			p.bad = true
			return ""
		case c != '\\':
			b = append(b, c)
			j++
			continue
		}
		if j+1 >= len(p.s) {
			break
		}
		switch e := p.s[j+1]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			if j+6 > len(p.s) {
				p.bad = true
				return ""
			}
			r, ok := hex4(p.s[j+2 : j+6])
			if !ok || r == 0 || (r >= 0xD800 && r <= 0xDFFF) {
				p.bad = true
				return ""
			}
			b = utf8.AppendRune(b, r)
			j += 6
			continue
		default:
			p.bad = true
			return ""
		}
		j += 2
	}
	p.bad = true // unterminated
	return ""
}

// hex4 decodes exactly four hex digits, either case (as encoding/json does).
func hex4(s string) (rune, bool) {
	var r rune
	for i := 0; i < 4; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// null consumes a JSON null if one is next.
func (p *fastScanner) null() bool {
	if !p.bad && strings.HasPrefix(p.s[p.i:], "null") {
		p.i += 4
		return true
	}
	return false
}

// nullableStr consumes null (ok false) or a string.
func (p *fastScanner) nullableStr() (string, bool) {
	if p.null() {
		return "", false
	}
	return p.str(), true
}

// int consumes an integer literal as intLiteral accepts it: an optional '-',
// digits without a leading zero, within int64. A fraction or an exponent is
// left unconsumed, so the literal that follows misses.
func (p *fastScanner) int() int64 {
	if p.bad {
		return 0
	}
	j := p.i
	if j < len(p.s) && p.s[j] == '-' {
		j++
	}
	d := j
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	if j == d || (j-d > 1 && p.s[d] == '0') {
		p.bad = true
		return 0
	}
	n, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
	if err != nil {
		p.bad = true
		return 0
	}
	p.i = j
	return n
}

// isMAC reports whether s is MACHexLen lowercase hex digits (reqMAC's rule).
func isMAC(s string) bool {
	if len(s) != MACHexLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// hasPrefix is strings.HasPrefix on bytes, without converting content.
func hasPrefix(content []byte, prefix string) bool {
	return len(content) >= len(prefix) && string(content[:len(prefix)]) == prefix
}

// fenceBox holds what a fast-path Fence points to, in one allocation.
type fenceBox struct {
	oldKey, newKey string
	pk             PrimaryKey
}

// parseFenceFast parses a fence in json_build_object's layout. ok is false on
// any miss; the strict parser then decides.
func parseFenceFast(content []byte) (f Fence, ok bool) {
	if !hasPrefix(content, fenceHead) || !utf8.Valid(content) {
		return Fence{}, false
	}
	p := fastScanner{s: string(content)}
	p.lit(fenceHead)
	kind := p.str()
	p.lit(fenceRelationID)
	f.RelationID = p.int()
	p.lit(fenceSchema)
	f.Schema = p.str()
	p.lit(fenceTable)
	f.Table = p.str()
	p.lit(fenceOp)
	op := p.str()
	p.lit(fenceOldKey)
	oldKey, hasOld := p.nullableStr()
	p.lit(fenceNewKey)
	newKey, hasNew := p.nullableStr()
	p.lit(fenceVersion)
	f.Version = p.str()
	p.lit(fenceFenceID)
	f.FenceID = p.str()
	p.lit(fenceOrdinal)
	f.Ordinal = p.int()
	if p.bad {
		return Fence{}, false
	}

	switch kind {
	case string(FenceSynced):
		f.Kind = FenceSynced
	case string(FenceCaptureDependency):
		f.Kind = FenceCaptureDependency
	default:
		return Fence{}, false
	}
	switch op {
	case string(FenceInsert):
		f.Op = FenceInsert
		ok = !hasOld && hasNew
	case string(FenceUpdate):
		f.Op = FenceUpdate
		ok = hasOld && hasNew && oldKey == newKey
	case string(FenceDelete):
		f.Op = FenceDelete
		ok = hasOld && !hasNew
	}
	key := newKey
	if !hasNew {
		key = oldKey
	}
	if !ok || f.RelationID <= 0 || f.Schema == "" || f.Table == "" ||
		f.Version == "" || !canonicalUUID(f.FenceID) {
		return Fence{}, false
	}

	var pk PrimaryKey
	switch f.Kind {
	case FenceSynced:
		p.lit(fenceTableID)
		f.TableID = p.str()
		p.lit(fencePK)
		if !p.bad && p.i < len(p.s) && p.s[p.i] == '"' {
			pk.Str = p.str()
			ok = pk.Str == key
		} else {
			pk.IsInt, pk.Int = true, p.int()
			var buf [20]byte
			ok = string(strconv.AppendInt(buf[:0], pk.Int, 10)) == key
		}
		ok = ok && f.TableID != ""
	case FenceCaptureDependency:
		p.lit(fenceCaptureKey)
		f.CaptureKey = p.str()
	}
	p.lit(fenceMAC)
	f.MAC = p.str()
	p.lit(fastTail)
	p.end()
	if p.bad || !ok || !isMAC(f.MAC) {
		return Fence{}, false
	}

	f.Format = 2
	box := &fenceBox{oldKey: oldKey, newKey: newKey, pk: pk}
	if hasOld {
		f.OldKey = &box.oldKey
	}
	if hasNew {
		f.NewKey = &box.newKey
	}
	if f.Kind == FenceSynced {
		f.PK = &box.pk
	}
	return f, true
}

// parseActivationFast parses an activation in activate_registry()'s jsonb
// layout. ok is false on any miss; the strict parser then decides.
func parseActivationFast(content []byte) (a Activation, ok bool) {
	if !hasPrefix(content, activationHead) || !utf8.Valid(content) {
		return Activation{}, false
	}
	p := fastScanner{s: string(content)}
	p.lit(activationHead)
	a.MAC = p.str()
	p.lit(activationPrevious)
	hasPrevious := !p.null()
	var previous int64
	if hasPrevious {
		previous = p.int()
	}
	p.lit(activationGeneration)
	a.Generation = p.int()
	p.lit(fastTail)
	p.end()
	if p.bad || a.Generation <= 0 || !isMAC(a.MAC) {
		return Activation{}, false
	}
	if hasPrevious {
		if previous <= 0 || previous >= a.Generation {
			return Activation{}, false
		}
		a.Previous = &previous
	}
	return a, true
}
