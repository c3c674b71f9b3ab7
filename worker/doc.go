// Package worker is Tenure's engine: it claims jobs, runs their handlers, keeps their leases
// alive, and finishes them with fenced writes that a stale worker can never win.
//
// Where things are. The public API (what an application calls and configures):
//
//   - worker.go: Worker, New, Register/MustRegister, Start, Stop (RegisterBatch, for handlers
//     that take many jobs of a kind at once, is in batch.go); the engine's goroutines are
//     started here (one loop per queue, the finishers, the heartbeat, the listener, the sweeps).
//   - config.go: Config, QueueConfig, HandlerOptions and their documented defaults.
//   - errors.go: the sentinel errors and error types a handler returns or a caller checks
//     (JobError, Permanent, Snooze, StaleWriteError, ...).
//   - middleware.go: HandlerFunc and Middleware (what wraps every handler).
//   - retry.go: RetryPolicy and FullJitter, the retry schedule decided in the application.
//   - limits.go: Limit (flow control: max running, rate, per key) and the limited claims.
//   - progress.go (Progress, ProgressEvery, ErrInvalidProgress): see the engine list below.
//   - effect.go: Effect, SetOutput and the effect ledger (stable idempotency keys, fenced
//     records); external.go: ExternalLedger, effects recorded in another engine's store.
//   - metrics.go: Stats, Histogram, OutcomeCount (what tenureprom exports).
//   - privileges.go: the privilege check at Start (PermissionError).
//   - periodic.go: periodic jobs (Config.Periodic, NewPeriodicJob, Every, Cron): each tick is
//     enqueued once across workers, in the transaction that advances the schedule's row.
//
// The engine still in this package (unexported; docs/design.md draws it):
//
//   - queue.go: the queue loop, the one owner of a queue's state (slots, executions,
//     claimers' backoff, watermarks, fairness state, the claim mode's state); everything else reports to it over
//     channels (the diagram at the top of the file).
//   - claim.go: the claim path. Demand-driven claim loops per queue claim up to the free
//     handler slots with one statement that picks ids (FOR UPDATE SKIP LOCKED) and hands them
//     to the one ownership statement, tenure.own (state, lease on the database clock, claim
//     token, generation+1, attempts+1), before any handler starts; every claim returns one row
//     shape, converted once (fromClaimRow, engine.ToJobRow) to the *generics.JobRow handlers see; per-band
//     watermarks keep claims off the dead index entries earlier claims left behind.
//   - claimmode.go: the one interface of the claim modes (ordered, fair, counted limits,
//     permits): plan on the loop, run on a claim goroutine, learn on the loop; every mode's
//     state belongs to the loop, which also starts the handlers of what a claim returned.
//   - claimbatch.go: the claim batcher: the plain ordered claims of many queues of one worker
//     go to the database as one statement (ClaimOrderedMany).
//   - fairness.go: Fairness and Aging, the fairness hook's configuration (the policy itself is
//     engine.Policy, below); fairshare.go: per-tenant fair share (Fairness.FairShare) within a
//     band.
//   - permits.go: per-worker shares of MaxRunning limits, claimed without waiting for others.
//   - execute.go: running a handler, panics, timeouts, and classifying its result.
//   - batch.go: batch handlers (RegisterBatch, BatchOptions, JobContext): the queue loop forms
//     batches of a kind from its claims (MaxSize, MaxWait) and starts one goroutine per call;
//     each job keeps its own slot, lease, heartbeat and fenced finish.
//   - finish.go: the completion path: batched fenced finishes checked by affected rows,
//     stale-write accounting, retry of writes the database did not answer, CompleteTx.
//   - heartbeat.go: batched fenced lease extensions, lease loss, stuck handlers, cancel.
//   - progress.go: Progress, a running job's progress, carried by the heartbeat statement
//     (fenced like the lease) and written with the finish; unsent progress makes a job's
//     heartbeat due at most once per ProgressEvery.
//   - reclaim.go: the lease-expiry sweep (LEASE_EXPIRED) and retention pruning.
//   - listener.go: LISTEN/NOTIFY wake-ups (new jobs, cancel requests, queue pause changes) on
//     the channels of the worker's schema (Config.Schema, "tenure" by default; every statement,
//     channel and advisory lock of a worker is its schema's: docs/guide.md §22).
//   - pause.go: cluster-wide queue pause (jobs.Client.PauseQueue): the paused set is read at
//     Start, on NOTIFY and every QueueStateEvery; a paused queue's loop starts no claim.
//   - registry.go: the worker registry row and the kind defaults published at Start.
//   - engineerrors.go: the engine's own statements' failures: engineError (remembered in
//     Stats, logged through a throttle) and retryStale (stale cached plans re-run).
//   - workflow.go: DependencyOutput, a workflow task's typed read of its dependencies' outputs.
//     The engine has no workflow code: dependents are released by the database (the trigger
//     jobs_settle_dependents, migration 0020) in the transaction of the finish that resolves them.
//
// The engine's pieces that no longer need the Worker are in worker/internal/engine (its doc.go
// lists its files): the clock the engine's timing decisions read (a fake one in tests), the log
// throttle of repeated engine errors, the classification of database errors, the fairness
// policy (strict priority, aging, quotas, deadline promotion: a claim's segments), the
// payloads of the notifications the listener reads, the pipelines that send a claim's locks
// and riding completions with it in one round trip (AfterLock), the claim row and its one
// conversion to the *generics.JobRow handlers see (ToJobRow), what the batched claims learnt
// about empty bands (BandSkip), the periodic schedules' tick grid and catch-up decision
// (Ticks).
//
// Usage:
//
//	w, err := worker.New(pool, &worker.Config{
//		Queues: map[string]worker.QueueConfig{"default": {Concurrency: 20}},
//	})
//	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[SendReceipt]) error {
//		return send(ctx, job.Args)
//	}, &worker.HandlerOptions{Timeout: 30 * time.Second})
//	if err := w.Start(ctx); err != nil { ... } // ctx from signal.NotifyContext(..., os.Interrupt, syscall.SIGTERM)
//	<-ctx.Done()                                 // a graceful stop has begun (Config.ShutdownTimeout)
//	err = w.Stop(shutdownCtx)                    // wait for it; an earlier deadline tightens it
//
// A handler returns nil for success. Any other error is retried with full-jitter backoff
// until MaxAttempts, then the job is dead; Permanent(err) goes dead at once, RetryAfter(err, d)
// chooses the delay, WithCode(code, err) classifies. A panic is recovered (code PANIC); a
// handler past its timeout fails with TIMEOUT. The handler's context is cancelled with cause
// ErrLeaseLost when the lease is gone, ErrJobCancelled when an operator cancels the job, and
// ErrWorkerStopping on hard stop; check context.Cause before the next side effect.
//
// Execution is at least once. Job state is exactly once: only the owner of the current claim
// token can finish a job. External effects are exactly once when they go through Effect and the
// remote deduplicates by the effect's key.
package worker
