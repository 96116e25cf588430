package decode_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode"
)

// Wire format 3 (compactwire.go): the same fences as format 2, parsed strictly.

// cfield is one <length in characters>:<text> field.
func cfield(s string) string { return strconv.Itoa(utf8.RuneCountInString(s)) + ":" + s }

// compactFence renders a fence as _fence_source's format-3 message (mac last).
func compactFence(s fenceSpec) string {
	kind, op := "s", s.op[:1]
	if s.kind == "capture_dependency" {
		kind = "c"
	}
	b := "1:3" + cfield(kind) + cfield(strconv.FormatInt(s.relationID, 10)) + cfield(s.schema) + cfield(s.table) +
		cfield(op) + cfield(s.key) + cfield(s.version) + cfield(s.fid) + cfield(strconv.FormatInt(s.ordinal, 10))
	if s.kind == "synced" {
		typ := "s"
		if s.intKey {
			typ = "n"
		}
		b += cfield(s.tableID) + cfield(typ)
	}
	return b + testMAC
}

// encodeCompact renders a parsed fence back into format 3: a strict parser of a
// canonical format accepts exactly one text per fence.
func encodeCompact(f decode.Fence) string {
	kind := "s"
	if f.Kind == decode.FenceCaptureDependency {
		kind = "c"
	}
	b := "1:3" + cfield(kind) + cfield(strconv.FormatInt(f.RelationID, 10)) + cfield(f.Schema) + cfield(f.Table) +
		cfield(string(f.Op)[:1]) + cfield(f.Key()) + cfield(f.Version) + cfield(f.FenceID) +
		cfield(strconv.FormatInt(f.Ordinal, 10))
	if f.Kind == decode.FenceSynced {
		typ := "s"
		if f.PK.IsInt {
			typ = "n"
		}
		b += cfield(f.TableID) + cfield(typ)
	}
	return b + f.MAC
}

// fenceSpecs are the fences of validFences: every kind and op, int and string
// keys with escapes and unicode, odd names.
func fenceSpecs() []fenceSpec {
	var out []fenceSpec
	n := 0
	for _, kind := range []string{"synced", "capture_dependency"} {
		for _, op := range []string{"insert", "update", "delete"} {
			for ki, keys := range [][]string{intKeys, stringKeys} {
				for _, key := range keys {
					nm := names[n%len(names)]
					n++
					out = append(out, fenceSpec{
						kind: kind, op: op, key: key, intKey: ki == 0 && kind == "synced",
						relationID: int64(n), schema: nm[0], table: nm[1],
						version: "9b3c01d2e3f405162738495a6b7c8d9e", fid: fid,
						ordinal: int64(n * 1017), tableID: nm[1] + "_id",
					})
				}
			}
		}
	}
	return out
}

// A format-3 fence is the format-2 fence with the same values: same Fence but
// for Format and Signed (what its MAC covers: the content before the MAC).
func TestCompactFenceEquivalence(t *testing.T) {
	for _, s := range fenceSpecs() {
		v2, err := decode.ParseFence([]byte(pgObject(fenceFields(s))))
		require.NoError(t, err)
		require.Equal(t, 2, v2.Format)
		in := compactFence(s)
		v3, err := decode.ParseFence([]byte(in))
		require.NoError(t, err, "%q", in)
		require.Equal(t, 3, v3.Format)
		require.Equal(t, in[:len(in)-decode.MACHexLen], v3.Signed)
		require.Equal(t, in, encodeCompact(v3))
		v3.Format, v3.Signed = 2, ""
		require.Equal(t, v2, v3, "%q", in)
	}
}

// Messages as the fence triggers wrote them (PostgreSQL 15, test_decoding),
// one per kind and op; the string key holds a quote, a backslash, control
// characters, the field separators and characters of 2, 3 and 4 bytes.
var realCompact = map[string]string{
	"real_synced_insert":             "1:31:s1:16:public8:t_fenced1:i6:26551732:df2aa34b94494d31b82adc2a30622f7536:888be076-8e02-4d0f-9208-92b6396301636:3970018:t_fenced1:nb329f5e7f01045c57d13fbda4c541d35",
	"real_synced_update":             "1:31:s1:16:public8:t_fenced1:u1:732:2fe6cdaf733742ffb4f70402e81a432a36:9ab1268d-f08e-4bd7-92d3-8c2d4cba95ef6:3970028:t_fenced1:n7760ea8175b8c01f237ceeb58f86603a",
	"real_synced_delete":             "1:31:s1:16:public8:t_fenced1:d1:832:23cd1f214b8f436abe9be7d284250b4c36:026e6f53-35cf-4bb7-879c-5b977847e6906:3970038:t_fenced1:n4b43d739e5d124b70beef167cad17d78",
	"real_synced_insert_string_key":  "1:31:s1:36:public7:s_items1:i15:a\"b\\c\x01\té/ü€😀|:132:da2270363bdc4474a0b4b08a8998b53a36:bebe420d-f9f7-4a62-be7a-ea09c02956186:3970047:s_items1:s622ab69519d0cbe6194bc2f07ca538b1",
	"real_capture_dependency_insert": "1:31:c1:46:public4:deps1:i36:6f1e2c3d-4b5a-4789-9abc-def01234567832:94d0ae1a0ba04b74a00749d5594b3dff36:bd2111d3-2e48-42e4-8876-ae95c4aeb42c6:39700731901db645b7f445081f023396e318b8",
	"real_capture_dependency_update": "1:31:c1:46:public4:deps1:u36:6f1e2c3d-4b5a-4789-9abc-def01234567832:7969ea982eff4d558b3fe022a594320136:36be345a-d7fb-4636-8c2a-9c73246c7ddb6:3970086fa77b3b6b0e4c7c4d82165ef4dbc27e",
	"real_capture_dependency_delete": "1:31:c1:46:public4:deps1:d36:6f1e2c3d-4b5a-4789-9abc-def01234567832:f6402bb4755648c58568524605e756eb36:447ce374-7b59-4701-99c9-29633d0ae7a96:397009836b8f5705920629b81f7e48e64f8663",
}

func TestCompactFenceRealMessages(t *testing.T) {
	for name, in := range realCompact {
		f, err := decode.ParseFence([]byte(in))
		require.NoError(t, err, name)
		require.Equal(t, 3, f.Format)
		require.Equal(t, in, encodeCompact(f), name)
		switch name {
		case "real_synced_update":
			seven := "7"
			require.Equal(t, decode.Fence{Kind: decode.FenceSynced, RelationID: 1, Schema: "public", Table: "t_fenced",
				Op: decode.FenceUpdate, OldKey: &seven, NewKey: &seven, Version: "2fe6cdaf733742ffb4f70402e81a432a",
				FenceID: "9ab1268d-f08e-4bd7-92d3-8c2d4cba95ef", Ordinal: 397002, TableID: "t_fenced",
				PK: &decode.PrimaryKey{IsInt: true, Int: 7}, MAC: "7760ea8175b8c01f237ceeb58f86603a",
				Format: 3, Signed: in[:len(in)-32]}, f)
		case "real_synced_insert_string_key":
			key := "a\"b\\c\x01\té/ü€😀|:1"
			require.Nil(t, f.OldKey)
			require.Equal(t, &key, f.NewKey)
			require.Equal(t, &decode.PrimaryKey{Str: key}, f.PK)
		case "real_capture_dependency_delete":
			require.Equal(t, decode.FenceCaptureDependency, f.Kind)
			require.Equal(t, "6f1e2c3d-4b5a-4789-9abc-def012345678", f.CaptureKey)
			require.Equal(t, "6f1e2c3d-4b5a-4789-9abc-def012345678", *f.OldKey)
			require.Nil(t, f.NewKey)
			require.Nil(t, f.PK)
			require.Empty(t, f.TableID)
		}
	}
}

// Every deviation is a message_format error (the collator then ignores the
// message as malformed, docs/wire-format.md).
func TestCompactFenceMalformed(t *testing.T) {
	good := realCompact["real_synced_update"]
	body := good[:len(good)-32]
	mac := good[len(good)-32:]
	capture := realCompact["real_capture_dependency_insert"]
	cases := map[string]string{
		"version 4":           strings.Replace(good, "1:3", "1:4", 1),
		"version 2":           "1:2" + good[3:],
		"kind x":              strings.Replace(good, "1:s", "1:x", 1),
		"kind synced spelled": strings.Replace(good, "1:s", "6:synced", 1),
		"relation_id 0":       strings.Replace(good, "1:s1:16:", "1:s1:06:", 1),
		"relation_id 01":      strings.Replace(good, "1:s1:16:", "1:s2:016:", 1),
		"relation_id -1":      strings.Replace(good, "1:s1:16:", "1:s2:-16:", 1),
		"relation_id text":    strings.Replace(good, "1:s1:16:", "1:s1:x6:", 1),
		"schema empty":        strings.Replace(good, "6:public", "0:", 1),
		"table empty":         strings.Replace(good, "8:t_fenced1:u", "0:1:u", 1),
		"op x":                strings.Replace(good, "1:u", "1:x", 1),
		"op spelled":          strings.Replace(good, "1:u", "6:update", 1),
		"int key empty":       strings.Replace(good, "1:u1:7", "1:u0:", 1),
		"int key 07":          strings.Replace(good, "1:u1:7", "1:u2:07", 1),
		"int key -0":          strings.Replace(good, "1:u1:7", "1:u2:-0", 1),
		"int key overflow":    strings.Replace(good, "1:u1:7", "1:u19:9223372036854775808", 1),
		"int key +7":          strings.Replace(good, "1:u1:7", "1:u2:+7", 1),
		"version empty":       strings.Replace(good, "32:2fe6cdaf733742ffb4f70402e81a432a", "0:", 1),
		"fence_id uppercase":  strings.Replace(good, "9ab1268d", "9AB1268D", 1),
		"fence_id short":      strings.Replace(good, "36:9ab1268d-", "35:9ab1268d", 1),
		"ordinal 01":          strings.Replace(good, "6:397002", "7:0397002", 1),
		"ordinal empty":       strings.Replace(good, "6:397002", "0:", 1),
		"length leading zero": strings.Replace(good, "6:public", "06:public", 1),
		"length too long":     strings.Replace(good, "6:public", "7:public", 1),
		"length too short":    strings.Replace(good, "6:public", "5:public", 1),
		"length huge":         strings.Replace(good, "6:public", "999999:public", 1),
		"length missing":      strings.Replace(good, "6:public", ":public", 1),
		"length no colon":     strings.Replace(good, "6:public", "6public", 1),
		"pk type x":           body[:len(body)-1] + "x" + mac,
		"pk type missing":     body[:len(body)-3] + mac,
		"table_id empty":      strings.Replace(good, "8:t_fenced1:n", "0:1:n", 1),
		"synced without tail": strings.Replace(good, "8:t_fenced1:n", "", 1),
		"capture with tail":   capture[:len(capture)-32] + "1:t1:s" + capture[len(capture)-32:],
		"trailing field":      body + "1:x" + mac,
		"trailing byte":       good + "0",
		"mac uppercase":       body + strings.ToUpper(mac),
		"mac short":           body + mac[:31],
		"mac missing":         body,
		"mac not hex":         body + "g" + mac[1:],
		"nul byte":            strings.Replace(good, "8:t_fenced1:u", "8:t_fen\x00ed1:u", 1),
		"invalid utf-8":       strings.Replace(good, "8:t_fenced1:u", "8:t_fen\xffed1:u", 1),
		"cut in a rune":       strings.Replace(good, "6:public", "2:\xc3\xbc", 1)[:40],
		"empty":               "",
		"head only":           "1:3",
		"head and mac":        "1:3" + mac,
		"json with head":      `1:3{"v":3}` + mac,
	}
	for name, in := range cases {
		require.NotEqual(t, good, in, name)
		_, err := decode.ParseFence([]byte(in))
		require.Error(t, err, name)
		c, ok := decode.ClassOf(err)
		require.True(t, ok, name)
		require.Equal(t, decode.ClassMessageFormat, c, name)
		require.Less(t, len(err.Error()), 200, name)
	}
}

// FuzzFenceCompact: the format-3 parser never panics, fails only with
// message_format, and accepts exactly one text per fence: what it accepts,
// rendered again, is the input byte for byte. Seeds:
// testdata/fuzz/FuzzFenceCompact (real messages, one per kind and op) and the
// generated ones.
func FuzzFenceCompact(f *testing.F) {
	for i, s := range fenceSpecs() {
		if i%7 == 0 {
			f.Add([]byte(compactFence(s)))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fence, err := decode.ParseFence(data)
		if err != nil {
			if c, _ := decode.ClassOf(err); c != decode.ClassMessageFormat {
				t.Fatal(err)
			}
			return
		}
		if fence.Format == 3 {
			require.Equal(t, string(data), encodeCompact(fence))
			require.Equal(t, string(data[:len(data)-decode.MACHexLen]), fence.Signed)
		}
	})
}
