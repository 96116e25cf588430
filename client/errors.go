package client

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs of the contract that the client reacts to.
const (
	codeInvalidArgument     = "SY400"
	codeScopeDenied         = "SY403"
	codeRebuildRequired     = "SY409"
	codeIdempotencyConflict = "SY410"
	codeCapturePending      = "SY503"
)

var (
	// ErrChecksumMismatch: the rebuild's checksum does not match the rows received;
	// nothing was applied and the scope keeps its previous state.
	ErrChecksumMismatch = errors.New("synchro client: rebuild checksum mismatch")
	// ErrCapturePending: SY503 persisted through every backoff attempt.
	ErrCapturePending = errors.New("synchro client: capture pending")
	// ErrScopeDenied: SY403, the scope authorizer refused this client the scope.
	ErrScopeDenied = errors.New("synchro client: scope denied")
	// ErrRebuildLoop: SY409 kept coming back after Config.MaxRebuilds consecutive
	// rebuilds in one Sync.
	ErrRebuildLoop = errors.New("synchro client: too many consecutive rebuilds")
	// ErrIdempotencyConflict: SY410, a mutation id was reused with other content.
	ErrIdempotencyConflict = errors.New("synchro client: idempotency conflict")
	// ErrClientRetired: SY409 on push, an operator retired this client id
	// (synchro.retire_client): its outcomes and fences are gone and the id is
	// refused for ever. Continue as a new client: a new ClientID and a new store
	// (every scope rebuilt).
	ErrClientRetired = errors.New("synchro client: client id retired")
	// ErrNotSubscribed: the scope was never passed to Subscribe.
	ErrNotSubscribed = errors.New("synchro client: scope not subscribed")
)

// sqlState is the SQLSTATE of a server error, "" for anything else.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// classify wraps a server error in the client's sentinel for its SQLSTATE.
func classify(err error) error {
	switch sqlState(err) {
	case codeScopeDenied:
		return fmt.Errorf("%w: %w", ErrScopeDenied, err)
	case codeIdempotencyConflict:
		return fmt.Errorf("%w: %w", ErrIdempotencyConflict, err)
	case codeCapturePending:
		return fmt.Errorf("%w: %w", ErrCapturePending, err)
	}
	return err
}

// scopeRef names a scope in errors and logs without its text: scope strings carry
// application identifiers (user ids, tenant names), so errors and logs carry a short
// hash instead, the same for the same scope (grep-able across lines, and computable by
// whoever knows the scope).
func scopeRef(scope string) string {
	h := sha256.Sum256([]byte(scope))
	return "sha256:" + hex.EncodeToString(h[:6])
}
