// Package msgauth authenticates the pack's own logical messages in the runner
// (docs/wire-format.md, "mac").
//
// pg_logical_emit_message is executable by PUBLIC, so a message's prefix says
// nothing about who emitted it. The fence triggers and activate_registry, running
// as the pack's owner, sign every message they emit:
//
//	mac = lowercase hex of the first 16 bytes of
//	      HMAC-SHA-256(server key, "synchro.msg" 0x00 prefix 0x00 body)
//
// where body is the message's fields in a fixed order, each as <length>:<text>
// (synchro._message_body). The runner verifies it before it stages a message, so
// a message nobody signed never reaches materialization: it is dropped and
// counted, as if it had never been emitted. Until issue 7 materialization
// recomputed the MAC in SQL, about 26 µs per fence and 13 % of a batch; here it
// costs about a microsecond.
//
// The runner reads the key's precomputed HMAC pads through
// synchro.runner_message_key() (EXECUTE for synchro_runner only). That adds no
// power to the role: it may already stage any row and call
// synchro.materialize_batch, which writes every synchro table as the owner.
package msgauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/synchro/synchro/runner/decode"
)

// blockSize is SHA-256's block size: the length of each HMAC pad (RFC 2104).
const blockSize = 64

// macBytes is how much of the HMAC a message carries (RFC 2104 section 5
// allows truncation to half the output): decode.MACHexLen hex digits.
const macBytes = 16

// domain separates message MACs from cursor and rebuild-token MACs
// (synchro._mac: text, one NUL, text): "synchro.msg" 0x00.
const domain = "synchro.msg\x00"

// Key holds the server key's HMAC pads. It is immutable and safe for
// concurrent use. It implements no Stringer and must never be logged.
type Key struct {
	inner, outer [blockSize]byte
}

// NewKey returns the key for the inner and outer pads stored in
// synchro.server_key (each 64 bytes: the key XOR 0x36, and XOR 0x5c).
func NewKey(innerPad, outerPad []byte) (*Key, error) {
	if len(innerPad) != blockSize || len(outerPad) != blockSize {
		return nil, errors.New("msgauth: the server key's pads must be 64 bytes each")
	}
	k := &Key{}
	copy(k.inner[:], innerPad)
	copy(k.outer[:], outerPad)
	return k, nil
}

// MAC returns the lowercase hex MAC of a message with this prefix and body.
func (k *Key) MAC(prefix, body string) string {
	var sum [macBytes]byte
	k.sum(sum[:], prefix, body)
	return hex.EncodeToString(sum[:])
}

func (k *Key) sum(out []byte, prefix, body string) {
	in := sha256.New()
	in.Write(k.inner[:])
	in.Write([]byte(domain))
	in.Write([]byte(prefix))
	in.Write([]byte{0})
	in.Write([]byte(body))
	var mid [sha256.Size]byte
	outer := sha256.New()
	outer.Write(k.outer[:])
	outer.Write(in.Sum(mid[:0]))
	var full [sha256.Size]byte
	copy(out, outer.Sum(full[:0]))
}

// Verify reports whether mac (as a message carries it: lowercase hex) is the
// MAC of prefix and body, in constant time.
func (k *Key) Verify(prefix, body, mac string) bool {
	if len(mac) != 2*macBytes {
		return false
	}
	var got [macBytes]byte
	if _, err := hex.Decode(got[:], []byte(mac)); err != nil {
		return false
	}
	// Only lowercase hex is the pack's form: the SQL compared the text.
	if hex.EncodeToString(got[:]) != mac {
		return false
	}
	var want [macBytes]byte
	k.sum(want[:], prefix, body)
	return hmac.Equal(got[:], want[:])
}

// VerifyFence reports whether a parsed synchro.fence message is authentic.
// A format-3 fence is its own MAC body (the content before the MAC); a format-2
// fence's body is rebuilt from its fields.
func (k *Key) VerifyFence(f *decode.Fence) bool {
	if f.Format == 3 {
		return k.Verify(decode.PrefixFence, f.Signed, f.MAC)
	}
	return k.Verify(decode.PrefixFence, FenceBody(f), f.MAC)
}

// VerifyActivation reports whether a parsed synchro.registry message is
// authentic.
func (k *Key) VerifyActivation(a *decode.Activation) bool {
	return k.Verify(decode.PrefixRegistry, ActivationBody(a), a.MAC)
}

// body builds synchro._message_body's text: each field as
// <length in characters>:<text>, a null or absent field as ":".
type body []byte

func (b body) str(s string) body {
	b = strconv.AppendInt(b, int64(utf8.RuneCountInString(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

func (b body) opt(s *string) body {
	if s == nil {
		return append(b, ':')
	}
	return b.str(*s)
}

func (b body) int(v int64) body { return b.str(strconv.FormatInt(v, 10)) }

// wireVersion is the "v" every message of this wire format carries.
const wireVersion = 2

// FenceBody is synchro._message_body('synchro.fence', content) of a parsed
// format-2 fence: v kind relation_id schema table op old_key new_key version fence_id
// ordinal table_id pk capture_key, each field as ->> renders it.
func FenceBody(f *decode.Fence) string {
	b := make(body, 0, 160+len(f.Schema)+len(f.Table)+3*len(f.Key())+len(f.Version)+len(f.CaptureKey))
	b = b.int(wireVersion).str(string(f.Kind)).int(f.RelationID).str(f.Schema).str(f.Table).str(string(f.Op))
	b = b.opt(f.OldKey).opt(f.NewKey).str(f.Version).str(f.FenceID).int(f.Ordinal)
	if f.Kind == decode.FenceSynced {
		b = b.str(f.TableID)
	} else {
		b = append(b, ':')
	}
	if f.PK != nil {
		b = b.str(f.PK.Text())
	} else {
		b = append(b, ':')
	}
	if f.Kind == decode.FenceCaptureDependency {
		b = b.str(f.CaptureKey)
	} else {
		b = append(b, ':')
	}
	return string(b)
}

// ActivationBody is synchro._message_body('synchro.registry', content) of a
// parsed activation: v generation previous.
func ActivationBody(a *decode.Activation) string {
	b := make(body, 0, 48)
	b = b.int(wireVersion).int(a.Generation)
	if a.Previous != nil {
		b = b.int(*a.Previous)
	} else {
		b = append(b, ':')
	}
	return string(b)
}
