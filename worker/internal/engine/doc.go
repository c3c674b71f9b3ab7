// Package engine is where worker's engine is moving: the pieces of the engine that are not
// part of worker's public API and no longer need the Worker they serve. Package worker (the
// public API: Worker, Config, Register, the handler-side helpers) builds on it; nothing outside
// worker imports it (Go's internal rule).
//
// Files:
//
//   - clock.go: Clock (with Timer and Ticker), the time the engine's own timing decisions read
//     (finish linger, stop plan, log throttle, permit regrow, flow prune schedule, queue-state
//     poll); RealClock is the system clock, tests set a fake one (worker's clock_test.go).
//   - logthrottle.go: LogThrottle, at most one log line per ErrorLogEvery per source of
//     repeated engine errors, counting the lines it held back (worker's engineError logs
//     through it).
//   - dberrors.go: classifying database errors: ClassifyWriteError (retry, split, abandon a
//     failed fenced write) and StalePlan (a cached statement refused after a schema change;
//     worker's retryStale re-runs those).
//   - fairness.go: the fairness hook: Policy turns a claim of n jobs into Segments (priority
//     band x age window, each with a limit, a rank and a band quota) for strict priority,
//     aging, quotas and deadline promotion, and keeps the quota credits; the queue loop owns
//     one per queue (worker.Fairness, the configuration, is copied into Fairness).
//   - notify.go: the payloads of the notifications the listener reads: new jobs (queue, and
//     the priority band and due time that wake a claim below its watermark), awaited ids.
//   - pipeline.go: AfterLock, a gen.DBTX that sends captured statements (advisory locks, a
//     permit lock, riding completions) and the query in one round trip and one implicit
//     transaction; Capture and LockStatement take the statements' texts from the generated
//     code, so every statement stays in db/queries.sql.
//   - claimrow.go: ClaimRow, the one row shape every claim statement returns (OwnedRows
//     converts sqlc's identical row types to it and splits off the claim mode's feedback,
//     DecodeFeedback reads it), and ToJobRow, the one conversion of an owned row to the
//     *generics.JobRow a handler sees, with the attempt's claim token.
//   - bandskip.go: BandSkip, what a queue's batched claims learnt about its empty priority
//     bands (left out of its next requests for at most BandSkipFor; the rules and their cost
//     at the top of the file), and ClaimSeg, one segment of a batched claim's request.
//   - periodic.go: Ticks, a periodic schedule's tick grid (an interval's multiples since the
//     epoch, or a cron schedule's ticks) and the catch-up decision for ticks that passed while
//     no worker could enqueue them, on the database's time.
//
// The rest of the engine (the queue loop, claims and claim modes, execution, finishes,
// heartbeats, sweeps, the listener, the registry) is still in package worker, as methods of
// Worker and its queue: worker/doc.go lists it. It moves here with the Worker's engine state.
package engine
