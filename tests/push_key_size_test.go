package tests

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// incompressibleKey is n characters of base64 over random bytes: no compression brings
// it under an index's size limit.
func incompressibleKey(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(b)[:n]
}

// Issue 13 item 5: a key longer than the documented 1024 bytes (octet_length of the key
// text) rejects just that mutation with 22001, never the whole call with 54000 (a btree
// index entry too large), which left a client's outbox stuck on it for ever.
func TestPushOversizedKey(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	big := incompressibleKey(t, 9000)

	idBig, idOK := pushID(), pushID()
	res := e.push("c1", pushJSON(t,
		pushIns(idBig, "tags", big, pm{"n": 1}),
		pushIns(idOK, "tags", "ok", pm{"n": 2})))
	reason := pushRejected(t, res[0], idBig, "22001")
	require.NotContains(t, reason, big[:16], "the reason carries no key")
	pushAccepted(t, res[1], idOK, true)
	require.Zero(t, e.count(`SELECT count(*) FROM public.tags WHERE name = $1`, big))
	require.Equal(t, "", e.version("tags", big))
	e.requireNoFence("c1", idBig)

	// Update and delete of such a key: the same, and the other mutations still apply.
	idUpd, idDel, idOK2 := pushID(), pushID(), pushID()
	res = e.push("c1", pushJSON(t,
		pushUpd(idUpd, "tags", big, "v", pm{"n": 3}),
		pushDel(idDel, "tags", big, "v"),
		pushIns(idOK2, "tags", "ok2", nil)))
	pushRejected(t, res[0], idUpd, "22001")
	pushRejected(t, res[1], idDel, "22001")
	pushAccepted(t, res[2], idOK2, true)

	// The outcome is recorded: a replay returns it byte for byte and writes nothing.
	first, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(idBig, "tags", big, pm{"n": 1})))
	require.NoError(t, err)
	before := e.state(true)
	again, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(idBig, "tags", big, pm{"n": 1})))
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.Equal(t, before, e.state(true))

	// The limit counts bytes, not characters: 1024 bytes of two-byte characters pass,
	// one byte more does not.
	at := strings.Repeat("é", 512)
	over := "a" + at
	idAt, idOver := pushID(), pushID()
	res = e.push("c1", pushJSON(t, pushIns(idAt, "tags", at, pm{"n": 4}), pushIns(idOver, "tags", over, pm{"n": 5})))
	v := pushAccepted(t, res[0], idAt, true)
	e.requireFence("c1", idAt, "tags", at, "insert", v)
	pushRejected(t, res[1], idOver, "22001")
}
