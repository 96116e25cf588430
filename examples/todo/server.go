package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maxBody bounds a request body: a push carries at most 1000 mutations.
const maxBody = 8 << 20

// deviceID is the X-Device header: which of the user's devices calls.
var deviceID = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// Server is the todo service's HTTP API: push, pull and rebuild for the calling user's
// todos, each one call of the SQL function of the same name.
//
//	POST /v1/push     {"mutations": [...]}                    → synchro.push's result
//	POST /v1/pull     {"scope", "cursor", "max_changes"}      → synchro.pull's result
//	POST /v1/rebuild  {"scope", "session", "max_rows"}        → synchro.rebuild's result
//
// Every request authenticates a user (HTTP Basic, checked against Users) and names the
// device (X-Device). The device's client_id is "<user>/<device>". scope defaults to the
// user's own, "todos:<user>"; any other scope is passed on and refused by the
// database's scope authorizer (403).
type Server struct {
	// DB connects as a role with todo_app's rights (newPool sets it).
	DB *pgxpool.Pool
	// Users maps user names to passwords. A stand-in for the application's real
	// authentication.
	Users map[string]string
	// Logger gets one line per failed call, without row values.
	Logger *slog.Logger
}

// Handler routes the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/push", s.authenticated(s.push))
	mux.HandleFunc("POST /v1/pull", s.authenticated(s.pull))
	mux.HandleFunc("POST /v1/rebuild", s.authenticated(s.rebuild))
	return mux
}

// caller is the authenticated user and device of a request.
type caller struct {
	user     string
	clientID string
}

func (c caller) ownScope() string { return "todos:" + c.user }

// authenticated checks the user and the device, records the device as the user's (the
// row the scope authorizer consults) and calls next.
func (s *Server) authenticated(next func(http.ResponseWriter, *http.Request, caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		want, known := s.Users[user]
		if !ok || !known || subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="todo"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "")
			return
		}
		dev := r.Header.Get("X-Device")
		if !deviceID.MatchString(dev) {
			writeError(w, http.StatusBadRequest, "invalid_argument", "X-Device must match ^[a-z0-9-]{1,64}$")
			return
		}
		c := caller{user: user, clientID: user + "/" + dev}
		if _, err := s.DB.Exec(r.Context(),
			`INSERT INTO todo.devices (client_id, user_id) VALUES ($1, $2) ON CONFLICT (client_id) DO NOTHING`,
			c.clientID, c.user); err != nil {
			s.fail(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		next(w, r, c)
	}
}

// mutation is one item of a push, kept as the device sent it except for the fields the
// service checks or sets.
type mutation map[string]any

// push calls synchro.push in a transaction that names the user for the row-level
// security policy of todo.todos. Inserted todos belong to the caller: the service sets
// owner. Every other rule (compare-and-swap, idempotency, the policy) is the database's.
func (s *Server) push(w http.ResponseWriter, r *http.Request, c caller) {
	var req struct {
		Mutations []mutation `json:"mutations"`
	}
	if !decode(w, r, &req) {
		return
	}
	for _, m := range req.Mutations {
		if m["table"] != "todos" {
			writeError(w, http.StatusBadRequest, "invalid_argument", "table must be todos")
			return
		}
		if m["op"] == "insert" {
			row, ok := m["row"].(map[string]any)
			if !ok {
				writeError(w, http.StatusBadRequest, "invalid_argument", "an insert needs a row")
				return
			}
			row["owner"] = c.user
		}
	}
	body, err := json.Marshal(req.Mutations)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var res []byte
	err = pgx.BeginFunc(r.Context(), s.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(r.Context(), `SELECT set_config('todo.user_id', $1, true)`, c.user); err != nil {
			return err
		}
		return tx.QueryRow(r.Context(), `SELECT synchro.push($1, $2::jsonb)::text`, c.clientID, string(body)).Scan(&res)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, res)
}

// pull returns one page of the scope's changes after the cursor.
func (s *Server) pull(w http.ResponseWriter, r *http.Request, c caller) {
	var req struct {
		Scope      string  `json:"scope"`
		Cursor     *string `json:"cursor"`
		MaxChanges int     `json:"max_changes"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Scope == "" {
		req.Scope = c.ownScope()
	}
	if req.MaxChanges == 0 {
		req.MaxChanges = 1000
	}
	var res []byte
	err := s.DB.QueryRow(r.Context(), `SELECT synchro.pull($1, $2, $3, $4)::text`,
		c.clientID, req.Scope, req.Cursor, req.MaxChanges).Scan(&res)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, res)
}

// rebuild returns one page of the scope's current rows; the last page carries the
// checksum and the cursor to pull from.
func (s *Server) rebuild(w http.ResponseWriter, r *http.Request, c caller) {
	var req struct {
		Scope   string  `json:"scope"`
		Session *string `json:"session"`
		MaxRows int     `json:"max_rows"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Scope == "" {
		req.Scope = c.ownScope()
	}
	if req.MaxRows == 0 {
		req.MaxRows = 1000
	}
	var res []byte
	err := s.DB.QueryRow(r.Context(), `SELECT synchro.rebuild($1, $2, $3, $4)::text`,
		c.clientID, req.Scope, req.Session, req.MaxRows).Scan(&res)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, res)
}

// statusOf maps Synchro's SQLSTATEs (docs/errors.md) to HTTP; ok is false for any
// other code.
func statusOf(code string) (status int, name string, ok bool) {
	switch code {
	case "SY400":
		return http.StatusBadRequest, "invalid_argument", true
	case "SY403":
		return http.StatusForbidden, "scope_denied", true
	case "SY409":
		return http.StatusConflict, "rebuild_required", true
	case "SY410":
		return http.StatusUnprocessableEntity, "idempotency_conflict", true
	case "SY503":
		return http.StatusServiceUnavailable, "capture_pending", true
	}
	return 0, "", false
}

// fail answers a failed call: a contract error as its HTTP status, anything else as
// 500. The body carries the SQLSTATE, never the database's message (it may name
// things the device has no business seeing).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if status, name, ok := statusOf(pgErr.Code); ok {
			if status == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			writeError(w, status, name, pgErr.Code)
			return
		}
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_argument", "")
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	s.Logger.Error("todo: call failed", "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, "internal", "")
}

// decode reads a JSON request body into v; on failure it answers 400 and returns false.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.UseNumber() // keys and values pass through as the device wrote them
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", "the body must be a JSON object")
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "invalid_argument", "one JSON object per request")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, name, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"error": name, "detail": detail})
	_, _ = fmt.Fprintf(w, "%s\n", b)
}
