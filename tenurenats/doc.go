// Package tenurenats is Tenure's optional path onto NATS JetStream, for the traffic that
// outgrows PostgreSQL (docs/guide.md, "Past one database: JetStream"). The core packages
// (generics, jobs, worker) never import NATS; only programs that import this package compile
// it.
//
// # Transactional outbox
//
// Publish writes a message into tenure.outbox (migration 0008) in the caller's transaction:
// it exists if and only if the business write commits. A Relay moves committed rows to
// JetStream:
//
//  1. claim: one autocommitted statement takes up to Batch pending rows, oldest first, with
//     FOR UPDATE SKIP LOCKED, and commits a fresh claim token and a lease (database clock)
//     on them — several relays share the outbox without waiting on each other;
//  2. publish: each row goes out with its msg_id as Nats-Msg-Id (and Nats-Expected-Stream
//     when RelayConfig.Stream is set); the relay waits for the acknowledgements;
//  3. mark: one fenced statement marks the acknowledged rows sent (with their stream
//     sequence) where the claim token still matches; a row another relay took over after the
//     lease is left to it. A failed publish makes its row claimable again after a full-jitter
//     delay (worker.FullJitter).
//
// A relay that dies anywhere leaves its rows to be claimed again when the lease ends, so a
// message can be published twice; JetStream drops the second by Nats-Msg-Id when it arrives
// inside the stream's duplicate window (StreamConfig.Duplicates, default 2 min). The window
// must exceed RelayConfig.DuplicateWindowNeeded (Run checks it when RelayConfig.Stream is
// set): then each committed message is stored in the stream exactly once.
//
// # Typed jobs on JetStream
//
// Client (Insert, or InsertTx through the outbox) publishes a generics.Args job to
// "<SubjectPrefix>.<kind>" with its kind, payload version, attempt budget and metadata in
// headers, validating exactly what jobs.Client validates. Worker consumes them with one
// durable pull consumer per kind and runs handlers of the same signature as worker.Register's,
// registered with the same worker.HandlerOptions:
//
//   - the job's identity is its stream sequence: generics.Job.ID is the sequence, Attempt and
//     Generation are the delivery count (NumDelivered), ClaimToken is new per delivery, Queue
//     is the stream's name and Priority is 0;
//   - failures are classified by worker.Classify (worker.Permanent, worker.RetryAfter,
//     worker.WithCode, timeouts, panics) and retried with NakWithDelay by the kind's
//     worker.RetryPolicy (default worker.FullJitter, the PostgreSQL engine's backoff);
//   - a job that fails permanently or uses up its attempts is published to
//     "<DeadLetterPrefix>.<kind>" with the error in headers, then terminated;
//   - while a handler runs, its message is kept in progress every Lease/3 (the consumer's
//     AckWait is the kind's HandlerOptions.Lease); a worker that dies stops doing so and the
//     message is redelivered after AckWait;
//   - worker.Effect works in these handlers when Config.Pool is set: the ledger is
//     tenure.stream_effects, keyed "nats:<stream>:job:<sequence>:effect:<name>" (with
//     Config.EffectKeyPrefix in front), and the first attempt to record a key wins.
//
// # Schema
//
// The outbox and the ledger live in Tenure's schema, "tenure" unless configured otherwise
// (docs/guide.md, "A schema of your own"): give the same name to PublishOpts.Schema (or
// ClientConfig.Schema for InsertTx), RelayConfig.Schema and Config.Schema (the ledger in
// Config.Pool); PendingIn and PruneSentIn take it too. Each schema has its own outbox, so a
// relay only relays the messages published into its schema.
//
// What JetStream does not give (no fencing of a stale attempt's acknowledgement, no
// priorities, no scheduled jobs, no operator re-inject of the same job id) is listed in the
// guide.
package tenurenats
