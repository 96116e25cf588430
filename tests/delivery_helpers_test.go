package tests

import "fmt"

// Duplicate and phantom deliveries in pull pages: what a reader of one scope may
// conclude from the changes of its own cursor chain, and only that. Used by TestModel's
// page audit and by the chaos readers.
//
// What the contract guarantees:
//
//   - CONTRACT.md "Pull": "Changes are the scope's pull effects after the cursor in
//     stream-position order", and a has_more cursor "is the position of the last
//     change returned". ADR 001: "A page may stop between effects derived from one
//     event and resume after the last delivered effect without replaying or skipping
//     another effect." So the changes of one cursor chain, page after page, are the
//     scope's stored effects after its first cursor, each exactly once.
//   - ADR 001: a transaction's effects are written after evaluating "the union of
//     impacted synchronized rows against that final projected state", as "net
//     membership and pull effects"; "On replay, an already durable transaction or event
//     identity must yield the same materialized result and must not create duplicate
//     versions, edges, or effects". So the effects after a position are the scope's
//     state transitions from that position: an upsert says the row is in the scope at
//     that version (a touched row gets a new version: every row operation "allocates one
//     opaque transition version"), a delete that a row in the scope left it.
//   - CONTRACT.md "Rebuild": "Pulling from it after applying every page yields exactly
//     the scope's current state", but "a row changed after P may arrive in its newer
//     state, and its effect after P arrives again by pull". Until the chain's first pull
//     to the end after a rebuild, a pulled change of a row the rebuild rows placed may
//     repeat what the reader holds (the same version again), and a delete may be of a
//     row the rebuild no longer listed (deleted after P, before the page that would have
//     held it). Once the chain reached the end (has_more false), the replica is exactly
//     the scope's state at the cursor, and each later change is a transition of it.
//
// Hence, for a change of a chain's pull page, checked when the chain is settled (a
// pull reached the end since its rebuild) or an earlier pull change of the chain set
// the key (the window's allowance covers only rows placed by the rebuild rows):
//
//   - an upsert at the version the replica holds is a change delivered twice;
//   - a delete of a key the replica does not hold is a delete the scope never owed it.
//
// Legitimate, and not flagged: a row that leaves the scope (delete) and comes back at
// the same version (upsert): the replica dropped it in between. Compaction never
// collapses effects a chain still reads: "Cursors below the horizon get SY409"
// (CONTRACT.md "Operator", compact), and the reader rebuilds, starting a new chain; so
// do a rule change of the scope's prefix and a stream reset (SY409). A projection
// bootstrap "creates no pull effects" (docs/bootstrap.md; ADR 001: "Baseline coverage
// creates no synthetic WAL event or incremental effect").

// deliveryChain is a reader's state of one scope along its cursor chain.
type deliveryChain struct {
	rep replica
	// settled: a pull reached the end (has_more false) since the last rebuild.
	settled bool
	// pulled: keys a pull change of this chain has set (upserted or deleted) since
	// the last rebuild.
	pulled map[string]bool
}

// startFrom starts a new chain from a rebuild's rows.
func (d *deliveryChain) startFrom(rows replica) {
	d.rep, d.settled, d.pulled = rows, false, map[string]bool{}
}

// apply applies one pull change (img: its canonical row image) and returns the
// contract violation it makes, "" when none.
func (d *deliveryChain) apply(ch change, img string) string {
	k := ch.key()
	old, present := d.rep[k]
	checked := d.settled || d.pulled[k]
	if d.pulled == nil {
		d.pulled = map[string]bool{}
	}
	d.pulled[k] = true
	if d.rep == nil {
		d.rep = replica{}
	}
	switch ch.Op {
	case "upsert":
		d.rep[k] = replicaRow{ch.Version, img}
		if checked && present && old.Version == ch.Version {
			return fmt.Sprintf("upsert of %s at version %s, which the replica already holds at that version (a change delivered twice)", k, ch.Version)
		}
	case "delete":
		delete(d.rep, k)
		if checked && !present {
			return fmt.Sprintf("delete of %s, which the replica does not hold (a delete delivered twice, or of a row never sent)", k)
		}
	default:
		return fmt.Sprintf("change of %s with op %q", k, ch.Op)
	}
	return ""
}

// pageEnd records the end of a pull page.
func (d *deliveryChain) pageEnd(hasMore bool) {
	if !hasMore {
		d.settled = true
	}
}
