// Package client is Synchro's reference client: the model that client SDKs in other
// languages follow. It keeps a local replica of the scopes it subscribes to in a
// SQLite file (the pure-Go driver modernc.org/sqlite) and talks to the server only
// through the SQL contract (CONTRACT.md): synchro.rebuild, synchro.pull and
// synchro.push.
//
// # Local store
//
// Three tables, created by Open (layout 1, PRAGMA user_version):
//
//	holds(scope, table_id, pk, version, row)  PRIMARY KEY (scope, table_id, pk)
//	scopes(scope PRIMARY KEY, cursor, synced) cursor NULL: the scope needs a rebuild
//	staging(scope, seq, change)               PRIMARY KEY (scope, seq)
//
// pk is the canonical key text: decimal digits for int and int64 keys (JSON numbers),
// the string itself for string keys, exactly as the rebuild checksum spells it. row is
// the row image as the server rendered it (JSON text), version its opaque version.
// synced numbers the scopes' completed transfers in local commit order (see Row).
//
// # Images are per scope
//
// Each scope's replica is a consistent view of that scope at its own stream position:
// a hold carries the scope's own image of the row, and a row that several scopes hold
// is stored once per scope. Images are never shared, because the client cannot tell
// which of two images is newer: versions are opaque and never ordered, and each
// scope's stream is at its own position. With one shared image, a scope that is
// behind would overwrite the newer image another scope already applied with an older
// one (its stream can end with the old upsert and then the row's delete, when the row
// left it), and the up-to-date scope, synced to the end of its stream, would never be
// sent the newer image again. Per-scope images make every scope independent: an
// upsert, a delete or a rebuild of one scope changes that scope's holds only, and a
// row leaves the replica when no scope holds it any more.
//
// Rows(scope) reads one scope's view. Row(table, pk) reads a row whatever scope holds
// it: when several do, the image of the scope whose Sync completed last, the newest
// server state the client has seen (the server materializes every scope in commit
// order, so of two Syncs that do not overlap the later one saw the later state).
//
// A store of layout 0 (one shared rows(table_id, pk, version, row) table) is upgraded
// by Open: each hold gets the image it pointed at, and every scope's cursor is dropped
// so that its next Sync rebuilds it, since a shared image may not be its own.
//
// # Sync
//
// Sync(scope) brings one scope up to date:
//
//  1. Without a cursor the scope is rebuilt: synchro.rebuild is called page by page
//     under its session token and every page is staged in SQLite. When the last page
//     arrives, one local transaction reads the staged rows back in delivery order,
//     computes the checksum of CONTRACT.md "Rebuild" over exactly what it is about to
//     apply and compares it with the server's; on a mismatch it rolls back and Sync
//     returns ErrChecksumMismatch with nothing applied. Otherwise the same transaction
//     replaces the scope's holds (and their images) with the rebuilt set. A rebuild
//     row changed after the rebuild's position may come in its newer state, so the
//     rows alone may be no state the scope ever had: before that transaction, the
//     pull from the last page's cursor is staged behind the rows (to has_more false),
//     and the same transaction applies it and saves its cursor. Other scopes' holds
//     are not touched.
//  2. With a cursor, synchro.pull is called page by page; pages are staged while
//     has_more is true. The page with has_more false closes the transfer: one local
//     transaction applies every staged change in order and saves that page's cursor
//     (seed 002, "Client obligation"). A cursor is never saved for partly applied
//     pages. A crash or error between pages leaves the old cursor; the staged pages
//     are discarded (by the transfer on an error, at the next Sync after a crash)
//     and fetched again.
//
// Two Clients may open one store file (Sync of one scope is serialized only within a
// Client). Each transfer stages its pages under sequence numbers of its own (a random
// base) and applies them only if all are still there and the scope's cursor is still
// the one it started from: the Client that applies first wins, the other drops its
// pages and pulls again from the cursor the first saved, which may be older than its
// own transfer's (so a Sync never ends with less than it fetched: a push accepted
// before it started is in). A Sync that lost its staged pages to the other returns an
// error and the next one fetches them again. Never a cursor past changes that were not
// applied.
//
// An upsert writes the scope's hold with its image (added, or replaced); a delete
// removes the scope's hold. Each scope converges to the server's state when it syncs
// to the end of its stream, whatever the positions of the other scopes.
//
// Cursors and session tokens are opaque: the client stores them and hands them back
// verbatim, it never parses, compares or orders them. Row versions are opaque too.
//
// # Errors
//
// The client reacts to the SQLSTATE of the server's error (pgconn.PgError.Code):
//
//   - SY409 rebuild_required: the scope's cursor is dropped at once (durably, so a
//     crash resumes with a rebuild) and the scope is rebuilt. Its holds stay readable
//     until the rebuild replaces them atomically. Consecutive rebuilds in
//     one Sync are bounded by Config.MaxRebuilds; past it Sync returns
//     ErrRebuildLoop wrapping the last SY409, so a misbehaving server cannot make the
//     client loop (LESSONS.md, "Resets and caches").
//   - SY503 capture_pending: the call is retried with exponential backoff
//     (Config.Backoff); after Backoff.MaxAttempts attempts the call fails with
//     ErrCapturePending.
//   - SY403 scope_denied: ErrScopeDenied.
//   - SY410 idempotency_conflict (push): ErrIdempotencyConflict.
//   - SY409 on push: the client id was retired by an operator (retire_client):
//     ErrClientRetired, never retried; the application continues as a new client
//     (a new ClientID and a new store).
//   - SY400 and everything else: returned as is.
//
// The sentinel errors wrap the *pgconn.PgError, so both errors.Is and errors.As work.
//
// Errors and log lines carry no key values, row values or scope strings: a scope is
// named by a short hash of its text ("sha256:" and 12 hex digits, the same for the same
// scope), a key by its length; counts, durations and SQLSTATEs are given as they are.
//
// # Push
//
// Push sends mutations with synchro.push and returns the per-mutation results. It
// does not touch the replica: an accepted write comes back through the WAL and pull,
// like any other write (and until it does, pull and rebuild of this client answer
// SY503, which Sync waits out).
package client
