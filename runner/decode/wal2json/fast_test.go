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
