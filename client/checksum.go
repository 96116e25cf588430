package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// Checksum is the rebuild checksum of CONTRACT.md "Rebuild" over rows in delivery
// order: h0 is 32 zero bytes; for each row h = SHA-256(h ‖ UTF-8 table ‖ 0x00 ‖ key
// text ‖ 0x00 ‖ version ‖ 0x0A). It returns the last h in lowercase hex (h0 for no
// rows). Row.PK must be the canonical key text (see KeyText); Row.Data is not hashed.
func Checksum(rows []Row) string {
	h := newChain()
	for _, r := range rows {
		h.add(r.Table, r.PK, r.Version)
	}
	return h.hex()
}

// chain is the running hash of Checksum.
type chain struct{ h [sha256.Size]byte }

func newChain() *chain { return &chain{} }

func (c *chain) add(table, pk, version string) {
	s := sha256.New()
	s.Write(c.h[:])
	s.Write([]byte(table))
	s.Write([]byte{0})
	s.Write([]byte(pk))
	s.Write([]byte{0})
	s.Write([]byte(version))
	s.Write([]byte{'\n'})
	s.Sum(c.h[:0])
}

func (c *chain) hex() string { return hex.EncodeToString(c.h[:]) }

// KeyText is the canonical text of a primary key, as the checksum and the local
// store spell it: decimal digits for an integer key (a JSON number), the string
// itself for a string key. It accepts a string, a Go integer, a json.Number or the
// raw JSON of the key (json.RawMessage).
func KeyText(pk any) (string, error) {
	switch v := pk.(type) {
	case string:
		return v, nil
	case json.Number:
		return numberText(string(v))
	case json.RawMessage:
		return rawKeyText(v)
	case int:
		return strconv.FormatInt(int64(v), 10), nil
	case int8:
		return strconv.FormatInt(int64(v), 10), nil
	case int16:
		return strconv.FormatInt(int64(v), 10), nil
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint8:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint16:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint32:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	}
	return "", fmt.Errorf("synchro client: key of type %T: want a string or an integer", pk)
}

func rawKeyText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("synchro client: key: %w", err)
		}
		return s, nil
	}
	return numberText(string(raw))
}

// numberText renders an integer key in decimal; int and int64 keys only.
func numberText(s string) (string, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return "", fmt.Errorf("synchro client: a key of %d bytes is neither a string nor an int64", len(s))
	}
	return strconv.FormatInt(n, 10), nil
}
