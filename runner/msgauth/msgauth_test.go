package msgauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode"
)

// pads derives the HMAC pads from a 32-byte key as migration 00002 does.
func pads(key []byte) (inner, outer []byte) {
	inner, outer = make([]byte, blockSize), make([]byte, blockSize)
	for i := range blockSize {
		var b byte
		if i < len(key) {
			b = key[i]
		}
		inner[i], outer[i] = b^0x36, b^0x5c
	}
	return inner, outer
}

// The MAC on precomputed pads is HMAC-SHA-256 (RFC 2104) truncated to 16 bytes.
func TestMACIsTruncatedHMAC(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	k, err := NewKey(pads(key))
	require.NoError(t, err)
	for _, c := range []struct{ prefix, body string }{
		{decode.PrefixFence, "1:2"}, {decode.PrefixRegistry, ""}, {"synchro.fence", "1:26:synced1:3:日本"},
	} {
		h := hmac.New(sha256.New, key)
		h.Write([]byte("synchro.msg\x00" + c.prefix + "\x00" + c.body))
		want := hex.EncodeToString(h.Sum(nil)[:16])
		require.Equal(t, want, k.MAC(c.prefix, c.body))
		require.True(t, k.Verify(c.prefix, c.body, want))
		require.False(t, k.Verify(c.prefix, c.body+"x", want))
		require.False(t, k.Verify(c.prefix+"x", c.body, want))
		require.False(t, k.Verify(c.prefix, c.body, want[:30]))
		require.False(t, k.Verify(c.prefix, c.body, "zz"+want[2:]))
	}
	_, err = NewKey(make([]byte, 63), make([]byte, 64))
	require.Error(t, err)
}

// Bodies count characters, render a null or absent field as ":" and a number
// as its digits (synchro._message_body; tests/runner_boundary_test.go compares
// them with the SQL on a real server).
func TestBodies(t *testing.T) {
	nk := "ü|1"
	f := &decode.Fence{Kind: decode.FenceSynced, RelationID: 12, Schema: "s", Table: "tä", Op: decode.FenceInsert,
		NewKey: &nk, Version: "v", FenceID: "id", Ordinal: 0, TableID: "t", PK: &decode.PrimaryKey{Str: nk}}
	require.Equal(t, "1:26:synced2:121:s2:tä6:insert:3:ü|11:v2:id1:01:t3:ü|1:", FenceBody(f))
	prev := int64(4)
	require.Equal(t, "1:21:5:", ActivationBody(&decode.Activation{Generation: 5}))
	require.Equal(t, "1:21:51:4", ActivationBody(&decode.Activation{Generation: 5, Previous: &prev}))
}
