package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// device is one of a user's devices as a todo app would write it: a local replica of
// the user's todos, a saved cursor and an outbox of mutations made while offline. It
// talks to the service over HTTP only and follows the contract's client obligations:
// it stages every page of a transfer and applies them with the closing cursor at once,
// verifies the rebuild checksum before applying anything, rebuilds on 409 and retries
// 503 (capture_pending).
type device struct {
	t          *testing.T
	base       string
	user, pass string
	name       string

	todos    map[string]todo // the replica, by id
	versions map[string]string
	cursor   string // "" until the first rebuild
	outbox   []mutation

	rebuilds int // completed rebuilds
}

// todo is a row image of todo.todos.
type todo struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	Title string `json:"title"`
	Done  bool   `json:"done"`
}

// pushResult is one entry of synchro.push's results.
type pushResult struct {
	ID      string          `json:"id"`
	Status  string          `json:"status"`
	Version *string         `json:"version"`
	Row     json.RawMessage `json:"row"`
	Code    string          `json:"code"`
}

func newDevice(t *testing.T, base, user, pass, name string) *device {
	return &device{t: t, base: base, user: user, pass: pass, name: name,
		todos: map[string]todo{}, versions: map[string]string{}}
}

func newUUID(t *testing.T) string {
	var b [16]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// call posts body to path and decodes a 200 answer into out; it returns the status
// and, for other statuses, the error name of the body.
func (d *device) call(path string, body, out any) (int, string) {
	d.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(d.t, err)
	req, err := http.NewRequest(http.MethodPost, d.base+path, bytes.NewReader(b))
	require.NoError(d.t, err)
	req.SetBasicAuth(d.user, d.pass)
	req.Header.Set("X-Device", d.name)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		require.NoError(d.t, json.NewDecoder(resp.Body).Decode(&e))
		return resp.StatusCode, e.Error
	}
	require.NoError(d.t, json.NewDecoder(resp.Body).Decode(out))
	return resp.StatusCode, ""
}

// callRetrying is call, retrying 503 capture_pending (the device's own push is not
// materialized yet) with a growing delay; it gives up after a minute.
func (d *device) callRetrying(path string, body, out any) (int, string) {
	d.t.Helper()
	delay := 20 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	for {
		status, name := d.call(path, body, out)
		if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return status, name
		}
		time.Sleep(delay)
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// create makes a todo locally (offline or not) and queues its insert.
func (d *device) create(title string) string {
	id := newUUID(d.t)
	d.todos[id] = todo{ID: id, Owner: d.user, Title: title}
	d.outbox = append(d.outbox, mutation{"id": newUUID(d.t), "table": "todos", "op": "insert", "pk": id,
		"row": map[string]any{"id": id, "title": title}})
	return id
}

// update changes fields of a todo locally and queues the update against the version
// the device holds.
func (d *device) update(id string, fields map[string]any) {
	t := d.todos[id]
	if v, ok := fields["title"].(string); ok {
		t.Title = v
	}
	if v, ok := fields["done"].(bool); ok {
		t.Done = v
	}
	d.todos[id] = t
	d.outbox = append(d.outbox, mutation{"id": newUUID(d.t), "table": "todos", "op": "update", "pk": id,
		"base_version": d.versions[id], "row": fields})
}

// remove deletes a todo locally and queues the delete.
func (d *device) remove(id string) {
	delete(d.todos, id)
	d.outbox = append(d.outbox, mutation{"id": newUUID(d.t), "table": "todos", "op": "delete", "pk": id,
		"base_version": d.versions[id]})
}

// push sends the outbox in one call and empties it. It returns the results; an
// accepted mutation is done, a conflict is the caller's to resolve.
func (d *device) push() []pushResult {
	d.t.Helper()
	if len(d.outbox) == 0 {
		return nil
	}
	var res struct {
		Results []pushResult `json:"results"`
	}
	status, name := d.call("/v1/push", map[string]any{"mutations": d.outbox}, &res)
	require.Equal(d.t, http.StatusOK, status, name)
	require.Len(d.t, res.Results, len(d.outbox))
	d.outbox = nil
	return res.Results
}

// sync pulls the device's own scope to the end (rebuilding when it has no cursor or
// the service answers 409) and applies it.
func (d *device) sync() {
	d.t.Helper()
	for range 3 {
		if d.cursor == "" {
			d.rebuild()
		}
		if d.pull() {
			return
		}
		d.cursor = "" // 409 rebuild_required: the cursor is gone, rebuild
	}
	d.t.Fatalf("%s: rebuild_required three times in a row", d.name)
}

type change struct {
	Table   string          `json:"table"`
	PK      string          `json:"pk"`
	Op      string          `json:"op"`
	Version string          `json:"version"`
	Row     json.RawMessage `json:"row"`
}

// pull stages pages until has_more is false, then applies them with the last cursor.
// False when the service answered 409 (the cursor is below the retention horizon).
func (d *device) pull() bool {
	d.t.Helper()
	cursor := d.cursor
	var staged []change
	for {
		var page struct {
			Changes []change `json:"changes"`
			Cursor  string   `json:"cursor"`
			HasMore bool     `json:"has_more"`
		}
		status, name := d.callRetrying("/v1/pull", map[string]any{"cursor": cursor, "max_changes": 2}, &page)
		if status == http.StatusConflict {
			require.Equal(d.t, "rebuild_required", name)
			return false
		}
		require.Equal(d.t, http.StatusOK, status, name)
		staged = append(staged, page.Changes...)
		cursor = page.Cursor
		if !page.HasMore {
			break
		}
	}
	for _, c := range staged {
		require.Equal(d.t, "todos", c.Table)
		switch c.Op {
		case "upsert":
			var row todo
			require.NoError(d.t, json.Unmarshal(c.Row, &row))
			d.todos[c.PK], d.versions[c.PK] = row, c.Version
		case "delete":
			delete(d.todos, c.PK)
			delete(d.versions, c.PK)
		default:
			d.t.Fatalf("pull: op %q", c.Op)
		}
	}
	d.cursor = cursor
	return true
}

// rebuild fetches every page of a rebuild session, checks the checksum over exactly
// the rows received and only then replaces the replica.
func (d *device) rebuild() {
	d.t.Helper()
	var session *string
	var rows []change
	h := make([]byte, 32)
	for {
		var page struct {
			Session  string   `json:"session"`
			Rows     []change `json:"rows"`
			HasMore  bool     `json:"has_more"`
			Checksum string   `json:"checksum"`
			Cursor   string   `json:"cursor"`
		}
		status, name := d.callRetrying("/v1/rebuild", map[string]any{"session": session, "max_rows": 2}, &page)
		require.Equal(d.t, http.StatusOK, status, name)
		for _, r := range page.Rows {
			// CONTRACT.md "Rebuild": h = SHA-256(h ‖ table ‖ 0x00 ‖ key ‖ 0x00 ‖ version ‖ 0x0A).
			sum := sha256.Sum256(fmt.Appendf(append([]byte{}, h...), "%s\x00%s\x00%s\n", r.Table, r.PK, r.Version))
			h = sum[:]
			rows = append(rows, r)
		}
		if page.HasMore {
			session = &page.Session
			continue
		}
		require.Equal(d.t, page.Checksum, hex.EncodeToString(h), "%s: rebuild checksum", d.name)
		d.todos, d.versions = map[string]todo{}, map[string]string{}
		for _, r := range rows {
			var row todo
			require.NoError(d.t, json.Unmarshal(r.Row, &row))
			d.todos[r.PK], d.versions[r.PK] = row, r.Version
		}
		d.cursor = page.Cursor
		d.rebuilds++
		return
	}
}
