package wal2json

import (
	"bufio"
	"bytes"
	"os"
	"reflect"
	"testing"
	"unicode/utf8"
)

func captured(t testing.TB) [][]byte {
	t.Helper()
	b, err := os.ReadFile("testdata/capture.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, bytes.Clone(sc.Bytes()))
	}
	return out
}

// Every captured payload takes the fast path, with the strict path's result.
func TestFastPathCapture(t *testing.T) {
	for i, p := range captured(t) {
		fast, ok := parseFast(p)
		if !ok {
			t.Fatalf("payload %d misses the fast path", i)
		}
		strict, err := parseStrict(0, p)
		if err != nil || !reflect.DeepEqual(fast, strict) {
			t.Fatalf("payload %d: fast %+v, strict %+v (%v)", i, fast, strict, err)
		}
	}
}

// FuzzFastPath: whatever the fast path accepts, the strict path accepts with the
// same document.
func FuzzFastPath(f *testing.F) {
	for _, p := range captured(f) {
		f.Add(p)
	}
	f.Add([]byte(`{"action":"I","columns":[{"name":"a","typeoid":25,"value":"x\u0041\n"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // Decode refuses it before either path (finding f82948106c953171)
		}
		fast, ok := parseFast(data)
		if !ok {
			return
		}
		strict, err := parseStrict(0, data)
		if err != nil {
			t.Fatalf("fast path accepts what the strict path refuses: %v", err)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Fatalf("fast %+v, strict %+v", fast, strict)
		}
	})
}

// TestTypeOIDPastTwoToThe31: wal2json 2.5 prints a type OID with "%d", so an OID past
// 2^31 arrives negative; both paths read its two's complement, an unsigned rendering
// as it is, and refuse what is no OID.
func TestTypeOIDPastTwoToThe31(t *testing.T) {
	doc := func(oid string) []byte {
		return []byte(`{"action":"I","columns":[{"name":"m","typeoid":` + oid + `,"value":"x"}],"pk":[{"name":"m","typeoid":` + oid + `}]}`)
	}
	for oid, want := range map[string]uint32{"-1294967296": 3000000000, "3000000000": 3000000000, "-2147483648": 1 << 31, "-1": 4294967295, "25": 25} {
		fast, ok := parseFast(doc(oid))
		strict, err := parseStrict(0, doc(oid))
		if !ok || err != nil || !reflect.DeepEqual(fast, strict) {
			t.Fatalf("typeoid %s: fast %+v (%v), strict %+v (%v)", oid, fast, ok, strict, err)
		}
		if uint32(fast.Columns[0].TypeOID) != want || uint32(fast.PK[0].TypeOID) != want {
			t.Fatalf("typeoid %s read as %d, want %d", oid, fast.Columns[0].TypeOID, want)
		}
	}
	for _, oid := range []string{"-2147483649", "4294967296", "--1", "1.5", "0x19"} {
		if _, err := parseStrict(0, doc(oid)); err == nil {
			t.Fatalf("typeoid %s accepted by the strict path", oid)
		}
		if _, ok := parseFast(doc(oid)); ok {
			t.Fatalf("typeoid %s accepted by the fast path", oid)
		}
	}
}
