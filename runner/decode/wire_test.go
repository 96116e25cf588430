package decode_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/synchro/synchro/runner/decode"
)

const fid = "6f1e2c3d-4b5a-4789-9abc-def012345678"

// wantClass requires err to be a *decode.Error of class, whose text carries no
// SECRET value.
func wantClass(t *testing.T, err error, class decode.Class) *decode.Error {
	t.Helper()
	var e *decode.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not *decode.Error", err, err)
	}
	if e.Class != class {
		t.Fatalf("class = %q (%v), want %q", e.Class, err, class)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("error leaks a value: %q", err.Error())
	}
	return e
}

func fenceJSON(t *testing.T, mutate func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"v": 2, "kind": "synced", "relation_id": 3, "schema": "public", "table": "tasks",
		"op": "update", "old_key": "42", "new_key": "42", "version": "9b3c01", "fence_id": fid,
		"ordinal": 1017, "table_id": "tasks", "pk": 42, "mac": "0123456789abcdef0123456789abcdef",
	}
	if mutate != nil {
		mutate(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func depFence(m map[string]any) {
	m["kind"] = "capture_dependency"
	delete(m, "table_id")
	delete(m, "pk")
	m["capture_key"] = "42"
}

func TestParseFenceValid(t *testing.T) {
	// The wire-format example, verbatim apart from the elided hex.
	f, err := decode.ParseFence([]byte(`{"v":2,"kind":"synced","relation_id":3,"schema":"public","table":"tasks","op":"update",
 "old_key":"42","new_key":"42","version":"9b3c","fence_id":"` + fid + `","ordinal":1017,
 "table_id":"tasks","pk":42,"mac":"0123456789abcdef0123456789abcdef"}`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind != decode.FenceSynced || f.RelationID != 3 || f.Schema != "public" || f.Table != "tasks" ||
		f.Op != decode.FenceUpdate || *f.OldKey != "42" || *f.NewKey != "42" || f.Version != "9b3c" ||
		f.FenceID != fid || f.Ordinal != 1017 || f.TableID != "tasks" || f.PK == nil || !f.PK.IsInt || f.PK.Int != 42 || f.CaptureKey != "" || f.MAC != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("fence = %+v", f)
	}
	if strings.Contains(f.String(), "9b3c\"") || strings.Contains(f.LogValue().String(), "tasks") {
		t.Fatalf("fence formatting leaks: %s / %s", f.String(), f.LogValue())
	}

	ok := map[string]func(m map[string]any){
		"insert":            func(m map[string]any) { m["op"] = "insert"; m["old_key"] = nil },
		"delete":            func(m map[string]any) { m["op"] = "delete"; m["new_key"] = nil },
		"string pk":         func(m map[string]any) { m["old_key"] = "ab"; m["new_key"] = "ab"; m["pk"] = "ab" },
		"negative int pk":   func(m map[string]any) { m["old_key"] = "-7"; m["new_key"] = "-7"; m["pk"] = -7 },
		"dependency":        depFence,
		"dependency delete": func(m map[string]any) { depFence(m); m["op"] = "delete"; m["new_key"] = nil },
		"int64 pk": func(m map[string]any) {
			m["old_key"] = "9223372036854775807"
			m["new_key"] = "9223372036854775807"
			m["pk"] = json.Number("9223372036854775807")
		},
	}
	// Escapes PostgreSQL writes (control characters) and an escaped backslash
	// followed by "u0000" (not an escape) parse.
	for _, schema := range []string{`"a\u0001b"`, `"a\\u0000"`, `"\"\\\/\b\f\n\r\t"`} {
		raw := strings.Replace(string(fenceJSON(t, nil)), `"schema":"public"`, `"schema":`+schema, 1)
		if _, err := decode.ParseFence([]byte(raw)); err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
	}
	for name, mut := range ok {
		t.Run(name, func(t *testing.T) {
			f, err := decode.ParseFence(fenceJSON(t, mut))
			if err != nil {
				t.Fatal(err)
			}
			switch name {
			case "insert":
				if f.OldKey != nil || *f.NewKey != "42" || f.Op.Op() != decode.OpInsert {
					t.Fatal(f)
				}
			case "delete":
				if f.NewKey != nil || *f.OldKey != "42" || f.Key() != "42" {
					t.Fatal(f)
				}
			case "string pk":
				if f.PK.IsInt || f.PK.Str != "ab" {
					t.Fatal(f)
				}
			case "dependency":
				if f.Kind != decode.FenceCaptureDependency || f.CaptureKey != "42" || f.PK != nil || f.TableID != "" {
					t.Fatal(f)
				}
			}
		})
	}
}

func TestParseFenceInvalid(t *testing.T) {
	raw := map[string]string{
		"not json":         `{"v":1`,
		"not object":       `[1]`,
		"null":             `null`,
		"trailing":         string(fenceJSON(t, nil)) + `{}`,
		"duplicate key":    `{"v":1,"v":1}`,
		"invalid utf8":     "{\"v\":1,\"schema\":\"\xff\"}",
		"v float":          strings.Replace(string(fenceJSON(t, nil)), `"v":2`, `"v":2.0`, 1),
		"v exponent":       strings.Replace(string(fenceJSON(t, nil)), `"v":2`, `"v":2e0`, 1),
		"ordinal float":    strings.Replace(string(fenceJSON(t, nil)), `"ordinal":1017`, `"ordinal":1017.5`, 1),
		"ordinal overflow": strings.Replace(string(fenceJSON(t, nil)), `"ordinal":1017`, `"ordinal":99999999999999999999`, 1),
		"nul escape":       strings.Replace(string(fenceJSON(t, nil)), `"schema":"public"`, `"schema":"pub\u0000lic"`, 1),
		"surrogate escape": strings.Replace(string(fenceJSON(t, nil)), `"schema":"public"`, `"schema":"pub\ud800lic"`, 1),
		"surrogate pair":   strings.Replace(string(fenceJSON(t, nil)), `"schema":"public"`, `"schema":"\ud83d\ude00"`, 1),
		"short escape":     strings.Replace(string(fenceJSON(t, nil)), `"schema":"public"`, `"schema":"\u00"`, 1),
	}
	for name, s := range raw {
		t.Run(name, func(t *testing.T) {
			_, err := decode.ParseFence([]byte(s))
			wantClass(t, err, decode.ClassMessageFormat)
		})
	}
	muts := map[string]func(m map[string]any){
		"unknown v":                  func(m map[string]any) { m["v"] = 3 },
		"v1 (no mac)":                func(m map[string]any) { m["v"] = 1; delete(m, "mac") },
		"missing mac":                func(m map[string]any) { delete(m, "mac") },
		"mac short":                  func(m map[string]any) { m["mac"] = "0123" },
		"mac upper case":             func(m map[string]any) { m["mac"] = "0123456789ABCDEF0123456789ABCDEF" },
		"mac not hex":                func(m map[string]any) { m["mac"] = "0123456789abcdef0123456789abcdeg" },
		"mac number":                 func(m map[string]any) { m["mac"] = 1 },
		"v string":                   func(m map[string]any) { m["v"] = "1" },
		"missing v":                  func(m map[string]any) { delete(m, "v") },
		"unknown field":              func(m map[string]any) { m["extra"] = true },
		"unknown kind":               func(m map[string]any) { m["kind"] = "other" },
		"missing kind":               func(m map[string]any) { delete(m, "kind") },
		"relation_id string":         func(m map[string]any) { m["relation_id"] = "3" },
		"relation_id zero":           func(m map[string]any) { m["relation_id"] = 0 },
		"missing relation_id":        func(m map[string]any) { delete(m, "relation_id") },
		"schema empty":               func(m map[string]any) { m["schema"] = "" },
		"schema number":              func(m map[string]any) { m["schema"] = 1 },
		"missing table":              func(m map[string]any) { delete(m, "table") },
		"unknown op":                 func(m map[string]any) { m["op"] = "upsert" },
		"missing old_key":            func(m map[string]any) { delete(m, "old_key") },
		"missing new_key":            func(m map[string]any) { delete(m, "new_key") },
		"old_key number":             func(m map[string]any) { m["old_key"] = 42 },
		"update keys differ":         func(m map[string]any) { m["new_key"] = "43"; m["pk"] = 43 },
		"update old_key null":        func(m map[string]any) { m["old_key"] = nil },
		"update new_key null":        func(m map[string]any) { m["new_key"] = nil },
		"insert with old_key":        func(m map[string]any) { m["op"] = "insert" },
		"insert new_key null":        func(m map[string]any) { m["op"] = "insert"; m["old_key"] = nil; m["new_key"] = nil },
		"delete with new_key":        func(m map[string]any) { m["op"] = "delete" },
		"delete old_key null":        func(m map[string]any) { m["op"] = "delete"; m["new_key"] = nil; m["old_key"] = nil },
		"empty key, int pk":          func(m map[string]any) { m["old_key"] = ""; m["new_key"] = "" },
		"missing version":            func(m map[string]any) { delete(m, "version") },
		"version empty":              func(m map[string]any) { m["version"] = "" },
		"fence_id uppercase":         func(m map[string]any) { m["fence_id"] = strings.ToUpper(fid) },
		"fence_id braces":            func(m map[string]any) { m["fence_id"] = "{" + fid + "}" },
		"fence_id no hyphens":        func(m map[string]any) { m["fence_id"] = strings.ReplaceAll(fid, "-", "") },
		"fence_id non-hex":           func(m map[string]any) { m["fence_id"] = "6f1e2c3d-4b5a-4789-9abc-def01234567g" },
		"missing fence_id":           func(m map[string]any) { delete(m, "fence_id") },
		"missing ordinal":            func(m map[string]any) { delete(m, "ordinal") },
		"ordinal string":             func(m map[string]any) { m["ordinal"] = "1" },
		"synced without table_id":    func(m map[string]any) { delete(m, "table_id") },
		"synced table_id null":       func(m map[string]any) { m["table_id"] = nil },
		"synced without pk":          func(m map[string]any) { delete(m, "pk") },
		"synced pk null":             func(m map[string]any) { m["pk"] = nil },
		"synced pk float":            func(m map[string]any) { m["pk"] = 42.5 },
		"synced pk bool":             func(m map[string]any) { m["pk"] = true },
		"synced pk differs from key": func(m map[string]any) { m["pk"] = 41 },
		"synced with capture_key":    func(m map[string]any) { m["capture_key"] = "42" },
		"dependency with table_id":   func(m map[string]any) { depFence(m); m["table_id"] = "tasks" },
		"dependency with pk":         func(m map[string]any) { depFence(m); m["pk"] = 42 },
		"dependency no capture_key":  func(m map[string]any) { depFence(m); delete(m, "capture_key") },
		"dependency capture_key num": func(m map[string]any) { depFence(m); m["capture_key"] = 42 },
	}
	for name, mut := range muts {
		t.Run(name, func(t *testing.T) {
			_, err := decode.ParseFence(fenceJSON(t, mut))
			wantClass(t, err, decode.ClassMessageFormat)
		})
	}
}

func TestParseRegistryActivation(t *testing.T) {
	a, err := decode.ParseRegistryActivation([]byte(`{"v":2,"generation":2,"previous":1,"mac":"0123456789abcdef0123456789abcdef"}`))
	if err != nil || a.Generation != 2 || a.Previous == nil || *a.Previous != 1 {
		t.Fatalf("activation = %+v, %v", a, err)
	}
	a, err = decode.ParseRegistryActivation([]byte(` { "previous" : null , "generation" : 1 , "v" : 2 , "mac" : "0123456789abcdef0123456789abcdef" } `))
	if err != nil || a.Generation != 1 || a.Previous != nil {
		t.Fatalf("activation = %+v, %v", a, err)
	}
	for _, s := range []string{
		``, `{}`, `[]`, `"x"`,
		`{"v":3,"generation":2,"previous":1,"mac":"0123456789abcdef0123456789abcdef"}`,
		`{"v":1,"generation":2,"previous":1,"mac":"0123456789abcdef0123456789abcdef"}`,
		`{"v":2,"generation":2,"previous":1}`,
		`{"v":2,"generation":2,"previous":1,"mac":"0123"}`,
		`{"generation":2,"previous":1}`,
		`{"v":2,"previous":1}`,
		`{"v":2,"generation":2}`,
		`{"v":2,"generation":"2","previous":1}`,
		`{"v":2,"generation":2.0,"previous":1}`,
		`{"v":2,"generation":0,"previous":null}`,
		`{"v":2,"generation":2,"previous":2}`,
		`{"v":2,"generation":2,"previous":3}`,
		`{"v":2,"generation":2,"previous":0}`,
		`{"v":2,"generation":2,"previous":"1"}`,
		`{"v":2,"generation":2,"previous":1,"x":1}`,
		`{"v":2,"generation":2,"previous":1,"generation":3}`,
		`{"v":2,"generation":2,"previous":1} 1`,
		`{"v":2,"generation":02,"previous":1}`,
	} {
		if _, err := decode.ParseRegistryActivation([]byte(s)); err == nil {
			t.Errorf("%q parsed", s)
		} else {
			wantClass(t, err, decode.ClassMessageFormat)
		}
	}
}
