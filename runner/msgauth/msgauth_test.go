package msgauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
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

// A format-3 fence is authenticated over its own content before the MAC
// (decode.Fence.Signed); any changed byte, or the same fields under format 2's
// body, fails.
func TestVerifyCompactFence(t *testing.T) {
	k, err := NewKey(pads([]byte("0123456789abcdef0123456789abcdef")))
	require.NoError(t, err)
	body := "1:31:s2:126:public5:tasks1:u3:ü|132:9b3c01d2e3f405162738495a6b7c8d9e36:6f1e2c3d-4b5a-4789-9abc-def0123456784:10175:tasks1:s"
	content := body + k.MAC(decode.PrefixFence, body)
	f, err := decode.ParseFence([]byte(content))
	require.NoError(t, err)
	require.Equal(t, body, f.Signed)
	require.True(t, k.VerifyFence(&f))
	require.False(t, k.VerifyActivation(&decode.Activation{Generation: 1, MAC: f.MAC}))

	// One character of a field changed (the message still parses).
	for _, from := range []string{"1:u", "5:tasks1:s", "4:1017", "2:12"} {
		to := map[string]string{"1:u": "1:i", "5:tasks1:s": "5:taskz1:s", "4:1017": "4:1018", "2:12": "2:13"}[from]
		g, err := decode.ParseFence([]byte(strings.Replace(content, from, to, 1)))
		require.NoError(t, err, from)
		require.False(t, k.VerifyFence(&g), from)
	}
	// The MAC of format 2's body for the same fields does not authenticate it.
	v2 := f
	v2.Format = 2
	v2.MAC = k.MAC(decode.PrefixFence, FenceBody(&v2))
	require.True(t, k.VerifyFence(&v2))
	f.MAC = v2.MAC
	require.False(t, k.VerifyFence(&f))
}
