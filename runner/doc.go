// Package runner is Synchro's WAL worker: the Go half of the sync engine that
// turns committed source transactions into materialized pull effects.
//
// One [Runner] serves one database. Its pipeline per replication session:
//
//	replication connection (stream.go: reader)
//	  → decode (package decode) → collate one source transaction (package collate)
//	  → stage in COPY batches; one synchro.materialize_batch call per batch of
//	    consecutive source transactions (apply.go: applier)
//	  → acknowledge (frontier.go: the boundary state machine)
//
// The reader and the applier run concurrently: the reader answers the server's
// keepalives with the durable boundary while the applier materializes, so a
// transaction of any size never trips wal_sender_timeout. The reader waits under
// a socket read deadline (a wake moves it to now) and hands payloads over in
// items that close at their transaction's commit: one hand-off per small
// transaction, not per message. The applier is the only
// writer of durable progress in a session (materialize, runner_idle, runner_ack,
// runner_poison), on one connection, one use at a time. At most one batch is in
// flight: its materialize_batch call and COMMIT run in a goroutine while the
// applier decodes and stages the next batch in memory, and every other use of the
// connection first joins that call; its outcome (durable boundary, metrics, a
// failure that belongs to it) is handled on the applier goroutine.
//
// Acknowledgement follows ADR 001: the processed boundary is made durable by
// the materialization commit (or runner_idle); only then is it reported to the
// slot, and only after pg_replication_slots shows the slot there is it recorded
// with runner_ack. Received but unmaterialized work is never acknowledged.
// Startup reconciliation ([Reconcile]) repairs a slot left behind or ahead of
// the recorded acknowledgement by a crash, and refuses anything else.
//
// Failures are classified by SQLSTATE and decoder class ([Classify]): transient
// ones are retried after a bounded backoff; everything else quarantines the
// source transaction (synchro.runner_poison) and blocks the stream until an
// operator calls synchro.retry_poison(). A session the server refuses when the
// runner connects is never poison: the refusals that pass with time (55000, 53xxx,
// 57P01-57P03, 08xxx: [IsTransientRefusal]) are retried, every other one stops the
// runner. Logs and errors never carry row values or passwords.
package runner
