// Package client is Synchro's reference client: the model that client SDKs in other
// languages follow. It keeps a local replica of the scopes it subscribes to in a
// SQLite file (the pure-Go driver modernc.org/sqlite) and talks to the server only
// through the SQL contract (CONTRACT.md): synchro.rebuild, synchro.pull and
// synchro.push.
//
// # Local store
//
// Four tables, created by Open:
//
//	rows(table_id, pk, version, row)          PRIMARY KEY (table_id, pk)
//	holds(scope, table_id, pk)                PRIMARY KEY (scope, table_id, pk)
//	scopes(scope PRIMARY KEY, cursor)         cursor NULL: the scope needs a rebuild
//	staging(scope, seq, change)               PRIMARY KEY (scope, seq)
//
// pk is the canonical key text: decimal digits for int and int64 keys (JSON numbers),
// the string itself for string keys, exactly as the rebuild checksum spells it. row is
// the row image as the server rendered it (JSON text). A row is stored once whatever
// the number of scopes that hold it; holds records which scopes do. A row leaves the
// replica only when no scope holds it any more: a delete in one scope, or a rebuild of
// one scope that no longer lists it, does not remove a row that another scope holds.
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
//     replaces the scope's holds with the rebuilt set, upserts the rows, drops the
//     rows that no scope holds any more and saves the last page's cursor.
//  2. With a cursor, synchro.pull is called page by page; pages are staged while
//     has_more is true. The page with has_more false closes the transfer: one local
//     transaction applies every staged change in order and saves that page's cursor
//     (seed 002, "Client obligation"). A cursor is never saved for partly applied
//     pages. A crash or error between pages leaves the old cursor; the staged pages
//     are discarded at the next Sync and fetched again.
//
// An upsert writes the row and adds the scope's hold; a delete removes the scope's
// hold and removes the row only when no other scope holds it.
//
// A row that several scopes hold is stored once and shows the image of whichever
// scope applied it last; versions are opaque, so the client never orders them. Each
// scope converges to the server's state when it syncs to the end of its stream.
//
// Cursors and session tokens are opaque: the client stores them and hands them back
// verbatim, it never parses, compares or orders them. Row versions are opaque too.
//
// # Errors
//
// The client reacts to the SQLSTATE of the server's error (pgconn.PgError.Code):
//
//   - SY409 rebuild_required: the scope's cursor is dropped at once (durably, so a
//     crash resumes with a rebuild) and the scope is rebuilt. The rows and holds stay
//     readable until the rebuild replaces them atomically. Consecutive rebuilds in
//     one Sync are bounded by Config.MaxRebuilds; past it Sync returns
//     ErrRebuildLoop wrapping the last SY409, so a misbehaving server cannot make the
//     client loop (LESSONS.md, "Resets and caches").
//   - SY503 capture_pending: the call is retried with exponential backoff
//     (Config.Backoff); after Backoff.MaxAttempts attempts the call fails with
//     ErrCapturePending.
//   - SY403 scope_denied: ErrScopeDenied.
//   - SY410 idempotency_conflict (push): ErrIdempotencyConflict.
//   - SY400 and everything else: returned as is.
//
// The sentinel errors wrap the *pgconn.PgError, so both errors.Is and errors.As work.
//
// # Push
//
// Push sends mutations with synchro.push and returns the per-mutation results. It
// does not touch the replica: an accepted write comes back through the WAL and pull,
// like any other write (and until it does, pull and rebuild of this client answer
// SY503, which Sync waits out).
package client
