// Package consumer runs a Synchro consumer group: a server-side consumer (a search
// indexer, a webhook sender, a cache invalidator) that receives every committed change
// of the synced tables as whole source transactions, in commit order, at its own pace,
// without a replication slot of its own (CONTRACT.md "Consumer groups";
// docs/sql/consumer_groups.md).
//
//	err := consumer.Run(ctx, consumer.Config{DB: pool, Group: "search"},
//		func(ctx context.Context, b consumer.Batch) error {
//			return applyIdempotently(ctx, b) // one destination transaction per batch
//		})
//
// The rules it follows:
//   - One lease per group at a time (synchro.acquire_lease): a second process with the
//     same group waits (55P03) and takes over when the lease expires or is released.
//   - The lease is renewed every RenewEvery while a batch is in flight. Every renewal
//     returns a new fencing token; a token that is not exactly the previous one plus one
//     shows that another owner held the lease in between, and the tenure ends.
//   - The tenure also ends by the process's own clock: a tenth of the lease (at most 2 s)
//     before the lease held runs out, counted from when the last successful renewal was
//     sent, the handler's context is cancelled, whatever a renewal is doing (a renewal
//     hung on a half-open connection, or failing at once, kept it live past the lease
//     while another owner took over). Each renewal and read is bounded by that moment.
//   - A batch is acknowledged (synchro.ack, its last position) only after the handler
//     returned nil. A handler error, a crash or a lost lease leaves the batch
//     unacknowledged: it is delivered again, whole, with the same change ids.
//   - Delivery is at least once: deduplicate on Change.ChangeID, or apply idempotently
//     (an upsert by key of the row image is).
//   - SY409 (ErrRebuildRequired): the group's checkpoint is gone; recreate the group
//     under a new name and rebuild the destination.
package consumer
