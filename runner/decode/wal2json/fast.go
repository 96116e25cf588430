package wal2json

import (
	"encoding/json"
	"strconv"
)

// The fast path: wal2json writes every format-2 document in one fixed layout
// (no white space, fields in its own order, keys never escaped), so a scanner
// for exactly that layout reads it without encoding/json's reflection and its
// case-insensitive key matching. Anything it does not expect (white space, an
// escaped key or name, a repeated or unknown field, a malformed value) is a
// miss, and the strict path (exactKeys + encoding/json) decides, so the
// accepted language and every result are the strict path's; fast_test.go
// (FuzzFastPath) checks that equivalence.

type scanner struct {
	b   []byte
	i   int
	bad bool
}

func (p *scanner) peek() byte {
	if p.bad || p.i >= len(p.b) {
		p.bad = true
		return 0
	}
	return p.b[p.i]
}

func (p *scanner) lit(c byte) {
	if p.peek() != c {
		p.bad = true
		return
	}
	p.i++
}

// plain reads a string without escapes and returns its bytes (a subslice).
func (p *scanner) plain() []byte {
	p.lit('"')
	start := p.i
	for !p.bad && p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1]
		case c == '\\' || c < 0x20:
			p.bad = true
			return nil
		}
		p.i++
	}
	p.bad = true
	return nil
}

// plainPtr reads a string without escapes, or null (nil).
func (p *scanner) plainPtr() *string {
	if p.null() {
		return nil
	}
	s := string(p.plain())
	return &s
}

// escape checks the escape at p.i (a backslash) as JSON defines it and moves
// past it.
func (p *scanner) escape() bool {
	if p.i+1 >= len(p.b) {
		return false
	}
	switch p.b[p.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		p.i += 2
		return true
	case 'u':
		if p.i+6 > len(p.b) {
			return false
		}
		for _, c := range p.b[p.i+2 : p.i+6] {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
				return false
			}
		}
		p.i += 6
		return true
	}
	return false
}

func (p *scanner) null() bool {
	if !p.bad && len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// raw reads one JSON scalar (string with any escapes, number, true, false,
// null) and returns its text; its grammar is checked where it is used.
func (p *scanner) raw() []byte {
	start := p.i
	switch p.peek() {
	case '"':
		p.i++
		for p.i < len(p.b) {
			switch c := p.b[p.i]; {
			case c == '"':
				p.i++
				return p.b[start:p.i]
			case c == '\\':
				if !p.escape() {
					p.bad = true
					return nil
				}
				continue
			case c < 0x20:
				p.bad = true
				return nil
			}
			p.i++
		}
		p.bad = true
		return nil
	case 'n', 't', 'f':
		for _, w := range []string{"null", "true", "false"} {
			if len(p.b)-p.i >= len(w) && string(p.b[p.i:p.i+len(w)]) == w {
				p.i += len(w)
				return p.b[start:p.i]
			}
		}
	default:
		for p.i < len(p.b) {
			c := p.b[p.i]
			if (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
				break
			}
			p.i++
		}
		if p.i > start && isNumber(p.b[start:p.i]) {
			return p.b[start:p.i]
		}
	}
	p.bad = true
	return nil
}

// uint32 reads a non-negative integer literal within uint32.
func (p *scanner) uint32() uint32 {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == start || (p.i-start > 1 && p.b[start] == '0') {
		p.bad = true
		return 0
	}
	n, err := strconv.ParseUint(string(p.b[start:p.i]), 10, 32)
	if err != nil {
		p.bad = true
	}
	return uint32(n)
}

// oid reads a type OID as wal2json prints it. Version 2.5 prints an OID with
// "%d" (pg_decode_write_tuple), so a type created after the cluster's OID counter
// passed 2^31 (an enum, a domain, their arrays) arrives negative: its two's
// complement is the OID. An unsigned rendering is read as it is.
func (p *scanner) oid() uint32 {
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
		n := p.uint32()
		if n == 0 || n > 1<<31 {
			p.bad = true
			return 0
		}
		return uint32(int32(-int64(n)))
	}
	return p.uint32()
}

func (p *scanner) boolean() *bool {
	switch {
	case !p.bad && len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		v := true
		return &v
	case !p.bad && len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		v := false
		return &v
	}
	p.bad = true
	return nil
}

// columns reads [{"name":…,"typeoid":…,"value":…},…] (withValue) or the pk
// form without "value". An empty array is a miss (the strict path decides).
func (p *scanner) columns(withValue bool) []wireColumn {
	p.lit('[')
	var out []wireColumn
	for !p.bad {
		var c wireColumn
		p.lit('{')
		p.key("name")
		c.Name = string(p.plain())
		p.lit(',')
		p.key("typeoid")
		c.TypeOID = wireOID(p.oid())
		if withValue {
			p.lit(',')
			p.key("value")
			c.Value = json.RawMessage(p.raw())
		}
		p.lit('}')
		out = append(out, c)
		if p.peek() == ']' {
			p.i++
			return out
		}
		p.lit(',')
	}
	return nil
}

func (p *scanner) key(k string) {
	if p.bad || len(p.b)-p.i < len(k)+3 || p.b[p.i] != '"' || string(p.b[p.i+1:p.i+1+len(k)]) != k ||
		p.b[p.i+1+len(k)] != '"' || p.b[p.i+2+len(k)] != ':' {
		p.bad = true
		return
	}
	p.i += len(k) + 3
}

// readKey reads the next key (plain) and its ':'.
func (p *scanner) readKey() string {
	k := p.plain()
	p.lit(':')
	return string(k)
}

// keyBits numbers a document's keys, to refuse a repeated one.
var keyBits = map[string]uint16{
	"action": 1 << 0, "xid": 1 << 1, "timestamp": 1 << 2, "lsn": 1 << 3, "nextlsn": 1 << 4, "schema": 1 << 5,
	"table": 1 << 6, "prefix": 1 << 7, "transactional": 1 << 8, "content": 1 << 9, "columns": 1 << 10,
	"identity": 1 << 11, "pk": 1 << 12,
}

// parseFast reads a document in wal2json's layout; ok false on any miss.
func parseFast(data []byte) (d document, ok bool) {
	p := scanner{b: data}
	p.lit('{')
	var seen uint16
	for !p.bad {
		k := p.readKey()
		bit, known := keyBits[k]
		if p.bad || !known || seen&bit != 0 {
			return document{}, false
		}
		seen |= bit
		switch k {
		case "action":
			d.Action = string(p.plain())
		case "xid":
			if !p.null() {
				x := p.uint32()
				d.Xid = &x
			}
		case "timestamp":
			d.Timestamp = p.plainPtr()
		case "lsn":
			d.LSN = p.plainPtr()
		case "nextlsn":
			d.NextLSN = p.plainPtr()
		case "schema":
			d.Schema = p.plainPtr()
		case "table":
			d.Table = p.plainPtr()
		case "prefix":
			d.Prefix = p.plainPtr()
		case "transactional":
			d.Transactional = p.boolean()
		case "content":
			d.Content = json.RawMessage(p.raw())
		case "columns":
			d.Columns = p.columns(true)
		case "identity":
			d.Identity = p.columns(true)
		case "pk":
			for _, c := range p.columns(false) {
				d.PK = append(d.PK, wirePK{Name: c.Name, TypeOID: c.TypeOID})
			}
		default:
			return document{}, false
		}
		if p.peek() == '}' {
			p.i++
			break
		}
		p.lit(',')
	}
	if p.bad || p.i != len(data) {
		return document{}, false
	}
	return d, true
}
