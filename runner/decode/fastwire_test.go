package decode_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode"
)

// The fast paths (fastwire.go) against the strict parsers: for every input,
// a fast-path hit is exactly the strict parser's success, and ParseFence /
// ParseRegistryActivation give exactly the strict result (value, or error
// class).

const testMAC = "5d0c9e1f2a3b4c5d6e7f80912a3b4c5d"

// pgString is PostgreSQL's escape_json: \" \\ \b \f \n \r \t, \u00xx for
// other control characters, everything else verbatim.
func pgString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

type field struct{ k, v string } // v: JSON text

// pgObject is json_build_object(...)::text: `{"k" : v, "k2" : v2}`.
func pgObject(fs []field) string { return object(fs, " : ", ", ") }

// jsonbObject is jsonb's text output: `{"k": v, "k2": v2}`.
func jsonbObject(fs []field) string { return object(fs, ": ", ", ") }

func object(fs []field, colon, comma string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteString(comma)
		}
		b.WriteString(pgString(f.k) + colon + f.v)
	}
	b.WriteByte('}')
	return b.String()
}

type fenceSpec struct {
	kind, op      string
	key           string
	intKey        bool
	relationID    int64
	schema, table string
	version, fid  string
	ordinal       int64
	tableID       string
}

func nullable(s string, null bool) string {
	if null {
		return "null"
	}
	return pgString(s)
}

// fenceFields are the fields of _fence_source's json_build_object, in order.
func fenceFields(s fenceSpec) []field {
	fs := []field{
		{"v", "2"}, {"kind", pgString(s.kind)}, {"relation_id", strconv.FormatInt(s.relationID, 10)},
		{"schema", pgString(s.schema)}, {"table", pgString(s.table)}, {"op", pgString(s.op)},
		{"old_key", nullable(s.key, s.op == "insert")}, {"new_key", nullable(s.key, s.op == "delete")},
		{"version", pgString(s.version)}, {"fence_id", pgString(s.fid)},
		{"ordinal", strconv.FormatInt(s.ordinal, 10)},
	}
	if s.kind == "synced" {
		pk := pgString(s.key)
		if s.intKey {
			pk = s.key
		}
		fs = append(fs, field{"table_id", pgString(s.tableID)}, field{"pk", pk})
	} else {
		fs = append(fs, field{"capture_key", pgString(s.key)})
	}
	return append(fs, field{"mac", pgString(testMAC)})
}

var (
	intKeys    = []string{"0", "1", "42", "-7", "1042", "9223372036854775807", "-9223372036854775808"}
	stringKeys = []string{
		"42", "ab", `a"b`, `a\b`, "tab\there", "nl\nx", "\x01ctl", "\x1f", "\b\f\r", "é", "日本語",
		"😀", "/slash/", "\x7f", "null", "-0", "0", "6f1e2c3d-4b5a-4789-9abc-def012345678",
		`\u0041`, `"`, strings.Repeat("k", 1024),
		"", // a text key PostgreSQL accepts: never poison
	}
	names = [][2]string{{"public", "tasks"}, {`We"ird`, `ta\ble`}, {"ümlaut", "t\x01"}, {"s/x", "日本"}}
)

// validFences are fences as the pack emits them: every kind and op, int and
// string keys with escapes and unicode, odd names.
func validFences() [][]byte {
	var out [][]byte
	n := 0
	for _, kind := range []string{"synced", "capture_dependency"} {
		for _, op := range []string{"insert", "update", "delete"} {
			for ki, keys := range [][]string{intKeys, stringKeys} {
				for _, key := range keys {
					nm := names[n%len(names)]
					n++
					out = append(out, []byte(pgObject(fenceFields(fenceSpec{
						kind: kind, op: op, key: key, intKey: ki == 0,
						relationID: int64(n), schema: nm[0], table: nm[1],
						version: "9b3c01d2e3f405162738495a6b7c8d9e", fid: fid,
						ordinal: int64(n * 1017), tableID: nm[1] + "_id",
					}))))
				}
			}
		}
	}
	return out
}

func validActivations() [][]byte {
	var out [][]byte
	for _, g := range []int64{1, 2, 3, 100, 9223372036854775807} {
		prevs := []string{"null"}
		if g > 1 {
			prevs = append(prevs, strconv.FormatInt(g-1, 10), "1")
		}
		for _, prev := range prevs {
			out = append(out, []byte(jsonbObject([]field{
				{"v", "2"}, {"mac", pgString(testMAC)}, {"previous", prev}, {"generation", strconv.FormatInt(g, 10)},
			})))
		}
	}
	return out
}

// sameFence checks the fast path and ParseFence against the strict parser on
// in, and reports whether the fast path hit.
func sameFence(t testing.TB, in []byte) bool {
	t.Helper()
	want, wantErr := decode.ParseFenceStrict(in)
	fast, hit := decode.ParseFenceFast(in)
	if hit {
		require.NoError(t, wantErr, "fast path accepted what the strict parser refuses: %q", in)
		require.Equal(t, want, fast, "%q", in)
	}
	got, err := decode.ParseFence(in)
	sameResult(t, in, want, wantErr, got, err)
	return hit
}

func sameActivation(t testing.TB, in []byte) bool {
	t.Helper()
	want, wantErr := decode.ParseActivationStrict(in)
	fast, hit := decode.ParseActivationFast(in)
	if hit {
		require.NoError(t, wantErr, "fast path accepted what the strict parser refuses: %q", in)
		require.Equal(t, want, fast, "%q", in)
	}
	got, err := decode.ParseRegistryActivation(in)
	sameResult(t, in, want, wantErr, got, err)
	return hit
}

func sameResult[T any](t testing.TB, in []byte, want T, wantErr error, got T, err error) {
	t.Helper()
	if wantErr != nil {
		require.Error(t, err, "%q", in)
		wc, _ := decode.ClassOf(wantErr)
		gc, _ := decode.ClassOf(err)
		require.Equal(t, wc, gc, "%q", in)
		require.Equal(t, decode.ClassMessageFormat, gc, "%q", in)
		return
	}
	require.NoError(t, err, "%q", in)
	require.Equal(t, want, got, "%q", in)
}

// mutations derives variants of a valid message: every truncation, and
// (when bytewise) every single-byte replacement and deletion.
func mutations(in []byte, bytewise bool) [][]byte {
	var out [][]byte
	for i := 0; i < len(in); i++ {
		out = append(out, in[:i])
	}
	out = append(out, append([]byte(" "), in...), append(append([]byte{}, in...), ' '),
		append(append([]byte{}, in...), "{}"...), append(append([]byte{}, in...), '\n'))
	if !bytewise {
		return out
	}
	repl := []byte{' ', '"', '\\', '0', '1', '9', '-', '.', 'e', 'x', 'A', '}', '{', ',', ':', 'n', 'u', 0x00, 0x01, 0x7f, 0xff}
	for i := 0; i < len(in); i++ {
		for _, c := range repl {
			if in[i] == c {
				continue
			}
			m := append([]byte{}, in...)
			m[i] = c
			out = append(out, m)
		}
		out = append(out, append(append([]byte{}, in[:i]...), in[i+1:]...))
	}
	return out
}

// structural derives variants at the field level: duplicated, unknown,
// dropped, swapped and replaced fields, and other layouts.
func structural(fs []field, render func([]field) string) [][]byte {
	var out [][]byte
	add := func(f []field) { out = append(out, []byte(render(f))) }
	with := func(f func(c []field) []field) {
		c := append([]field(nil), fs...)
		add(f(c))
	}
	values := []string{
		"null", `""`, "0", "-0", "1", "-1", "2", "3", "02", "2.0", "2e0", "1.5", "99999999999999999999",
		"+1", "true", "{}", "[]", `"x"`, `"42"`, "42", `"2"`, `"synced"`, `"insert"`, `"update"`,
		`"capture_dependency"`, pgString(strings.ToUpper(fid)), pgString(strings.ToUpper(testMAC)),
		pgString(testMAC[:31]), `"\u0000"`, `"\ud800"`, `"\ud83d\ude00"`, `"\u00e9"`, `"\u00E9"`, `"\/"`,
		`"\x"`, `"\u12"`, `"a\u0000b"`, "\"raw\ttab\"", `"syn\u0063ed"`, `"ins\u0065rt"`, `"\u0034\u0032"`,
	}
	for i := range fs {
		with(func(c []field) []field { return append(c[:i+1], c[i:]...) })                                   // duplicate
		with(func(c []field) []field { return append(c[:i], c[i+1:]...) })                                   // drop
		with(func(c []field) []field { return append(c[:i], append([]field{{"extra", "1"}}, c[i:]...)...) }) // unknown
		with(func(c []field) []field { c[i].k = strings.ToUpper(c[i].k); return c })                         // case
		with(func(c []field) []field { c[i].k += " "; return c })
		if i+1 < len(fs) {
			with(func(c []field) []field { c[i], c[i+1] = c[i+1], c[i]; return c }) // order
		}
		for _, v := range values {
			with(func(c []field) []field { c[i].v = v; return c })
		}
	}
	// Other layouts of the same fields, and an escaped key.
	out = append(out, []byte(object(fs, ":", ",")), []byte(object(fs, " : ", ",")),
		[]byte(object(fs, ": ", ", ")), []byte(object(fs, " :", ", ")), []byte(object(fs, " : ", " ,")))
	out = append(out, []byte(strings.Replace(render(fs), `"v"`, `"\u0076"`, 1)))
	return out
}

func TestFenceFastPathEquivalence(t *testing.T) {
	valid := validFences()
	var inputs int
	for i, in := range valid {
		require.True(t, sameFence(t, in), "the pack's own fence missed the fast path: %q", in)
		inputs++
		// Mutating every valid fence costs too much (the strict parser takes
		// tens of µs): truncations of a quarter of them, bytewise changes of a
		// spread over kinds, ops and key types (int, escaped, non-ASCII).
		if i%4 != 0 && i%58 != 0 && i%58 != 15 {
			continue
		}
		for _, m := range mutations(in, i%58 == 0 || i%58 == 15) {
			sameFence(t, m)
			inputs++
		}
	}
	for _, kind := range []string{"synced", "capture_dependency"} {
		for _, op := range []string{"insert", "update", "delete"} {
			for _, intKey := range []bool{true, false} {
				fs := fenceFields(fenceSpec{kind: kind, op: op, key: "42", intKey: intKey, relationID: 3,
					schema: "public", table: "tasks", version: "9b3c", fid: fid, ordinal: 1017, tableID: "tasks"})
				for _, m := range structural(fs, pgObject) {
					sameFence(t, m)
					sameActivation(t, m)
					inputs++
				}
			}
		}
	}
	t.Logf("%d fence inputs, %d valid", inputs, len(valid))
}

func TestActivationFastPathEquivalence(t *testing.T) {
	for _, in := range validActivations() {
		require.True(t, sameActivation(t, in), "activate_registry's message missed the fast path: %q", in)
		for _, m := range mutations(in, true) {
			sameActivation(t, m)
			sameFence(t, m)
		}
	}
	fs := []field{{"v", "2"}, {"mac", pgString(testMAC)}, {"previous", "1"}, {"generation", "2"}}
	for _, m := range structural(fs, jsonbObject) {
		sameActivation(t, m)
	}
}

// The fast path reads the pack's real output: json_build_object's text of a
// fence (captured from PostgreSQL 15, with escape_json's escapes in the key)
// and jsonb's text of an activation.
func TestFastPathRealMessages(t *testing.T) {
	fence := []byte(`{"v" : 2, "kind" : "synced", "relation_id" : 3, "schema" : "public", "table" : "tasks", "op" : "update", "old_key" : "a\"b\\c\u0001\té/", "new_key" : "a\"b\\c\u0001\té/", "version" : "9b3c01d2e3f405162738495a6b7c8d9e", "fence_id" : "4aab2a67-134d-411a-a484-f87b63b7b08b", "ordinal" : 1017, "table_id" : "tasks", "pk" : "a\"b\\c\u0001\té/", "mac" : "` + testMAC + `"}`)
	f, hit := decode.ParseFenceFast(fence)
	require.True(t, hit)
	require.Equal(t, "a\"b\\c\x01\té/", f.Key())
	require.Equal(t, "4aab2a67-134d-411a-a484-f87b63b7b08b", f.FenceID)
	sameFence(t, fence)

	act := []byte(`{"v": 2, "mac": "` + testMAC + `", "previous": null, "generation": 2}`)
	a, hit := decode.ParseActivationFast(act)
	require.True(t, hit)
	require.Nil(t, a.Previous)
	require.Equal(t, int64(2), a.Generation)
	sameActivation(t, act)
}

// The fast path allocates little: the content copy and one box.
func TestFenceFastPathAllocs(t *testing.T) {
	in := benchFence()
	require.True(t, utf8.Valid(in))
	allocs := testing.AllocsPerRun(100, func() {
		if _, hit := decode.ParseFenceFast(in); !hit {
			t.Fatal("miss")
		}
	})
	require.LessOrEqual(t, allocs, 2.0)
}

// FuzzFenceFastPath: for any input, the fast paths agree with the strict
// parsers (a hit is the strict success, value for value), and the public
// parsers give exactly the strict result. Seeds: testdata/fuzz/FuzzFenceFastPath
// (one real fence per kind and op, an activation) and the generated ones.
func FuzzFenceFastPath(f *testing.F) {
	for i, in := range validFences() {
		if i%7 == 0 {
			f.Add(in)
		}
	}
	for _, in := range validActivations() {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameFence(t, data)
		sameActivation(t, data)
	})
}

// benchFence is a realistic fence: a synced update of an int key, as
// json_build_object writes it.
func benchFence() []byte {
	return []byte(pgObject(fenceFields(fenceSpec{
		kind: "synced", op: "update", key: "1042", intKey: true, relationID: 3,
		schema: "public", table: "tasks", version: "9b3c01d2e3f405162738495a6b7c8d9e",
		fid: fid, ordinal: 123456, tableID: "tasks",
	})))
}

// BenchmarkParseFence: the strict parser (the baseline) and ParseFence (the
// fast path) on the same fence, in the same run; "fast" also reports
// strict-ns/op divided by its own as "x_faster".
func BenchmarkParseFence(b *testing.B) {
	in := benchFence()
	var strictNs float64
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode.ParseFenceStrict(in); err != nil {
				b.Fatal(err)
			}
		}
		strictNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode.ParseFence(in); err != nil {
				b.Fatal(err)
			}
		}
		if ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N); ns > 0 && strictNs > 0 {
			b.ReportMetric(strictNs/ns, "x_faster")
		}
	})
}
