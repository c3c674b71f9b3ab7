// Package engine is worker's engine: everything that runs jobs, behind package worker's
// public API (Worker, Config, Register, the handler-side helpers). worker.New builds an Engine
// from an engine.Config (never a public type: the import goes one way, worker -> engine), adds
// the registered kinds as Handlers, and starts and stops it. Nothing outside worker imports it
// (Go's internal rule).
//
// Files:
//
//   - clock.go: Clock (with Timer and Ticker), the time the engine's own timing decisions read
//     (finish linger, stop plan, log throttle, permit regrow, flow prune schedule, queue-state
//     poll); RealClock is the system clock, tests set a fake one (fakeclock.go).
//
//   - logthrottle.go: LogThrottle, at most one log line per ErrorLogEvery per source of
//     repeated engine errors, counting the lines it held back (worker's engineError logs
//     through it).
//
//   - dberrors.go: classifying database errors: ClassifyWriteError (retry, split, abandon a
//     failed fenced write) and StalePlan (a cached statement refused after a schema change;
//     worker's retryStale re-runs those).
//
//   - fairness.go: the fairness hook: Policy turns a claim of n jobs into Segments (priority
//     band x age window, each with a limit, a rank and a band quota) for strict priority,
//     aging, quotas and deadline promotion, and keeps the quota credits; the queue loop owns
//     one per queue (worker.Fairness, the configuration, is copied into Fairness).
//
//   - notify.go: the payloads of the notifications the listener reads: new jobs (queue, and
//     the priority band and due time that wake a claim below its watermark), awaited ids.
//
//   - pipeline.go: AfterLock, a gen.DBTX that sends captured statements (advisory locks, a
//     permit lock, riding completions) and the query in one round trip and one implicit
//     transaction; Capture and LockStatement take the statements' texts from the generated
//     code, so every statement stays in db/queries.sql.
//
//   - claimrow.go: ClaimRow, the one row shape every claim statement returns (OwnedRows
//     converts sqlc's identical row types to it and splits off the claim mode's feedback,
//     DecodeFeedback reads it), and ToJobRow, the one conversion of an owned row to the
//     *generics.JobRow a handler sees, with the attempt's claim token.
//
//   - bandskip.go: BandSkip, what a queue's batched claims learnt about its empty priority
//     bands (left out of its next requests for at most BandSkipFor; the rules and their cost
//     at the top of the file), and ClaimSeg, one segment of a batched claim's request.
//
//   - periodic.go: Ticks, a periodic schedule's tick grid (an interval's multiples since the
//     epoch, or a cron schedule's ticks) and the catch-up decision for ticks that passed while
//     no worker could enqueue them, on the database's time.
//
//   - engine.go: Engine (its state, and which goroutine owns what), New, AddHandler, Start
//     (the engine pool, the database checks, the paused queues, the goroutines), Stop and its
//     plan (soft stop, hard stop, release, abandon), and the test seams (SkipDeregister,
//     NoRide, SetClock).
//
//   - config.go: Config, QueueConfig, Limit, KindOptions (what worker makes of its public
//     configuration), Handler and NewHandler (a kind as the engine runs it).
//
//   - errors.go: ErrorCode and the codes the engine decides; the public sentinel errors, the
//     stale-write error's constructor, the classification of a handler's error (ClassifyError,
//     Verdict) and the default retry, all set by worker's init.
//
//   - metrics.go: Metrics, the counters and histograms worker.Stats reads; the Outcome* names.
//
//   - queue.go: the queue loop, the one owner of a queue's state (slots, executions,
//     claimers' backoff, watermarks, fairness state, the claim mode's state); everything else
//     reports to it over channels (the diagram at the top of the file).
//
//   - claim.go: the claim path: demand-driven claims of up to the free slots, one statement
//     that picks ids (FOR UPDATE SKIP LOCKED) and hands them to tenure.own before any handler
//     starts; watermarks; completions riding on claims.
//
//   - claimmode.go: the one interface of the claim modes (ordered, fair, counted limits,
//     permits): plan on the loop, run on a claim goroutine, learn on the loop.
//
//   - claimbatch.go: the claim batcher: the plain ordered claims of many queues as one
//     statement (ClaimOrderedMany).
//
//   - slotpool.go: the worker-wide slot pool (Config.Slots): handler slots the queues share,
//     granted to waiting queues in turn; the loops sync with it every turn (queue.go).
//
//   - fairshare.go: per-tenant fair share within a band (fairMode).
//
//   - limits.go: flow control's claims (countedMode: exclusive and striped), the proof that a
//     limit holds, RetryAfter's flow blocks, the flow prune.
//
//   - permits.go: per-worker shares of MaxRunning limits, claimed without waiting for others.
//
//   - execute.go: Execution (one claimed attempt; ExecutionFrom, the one context key),
//     running a handler on a reused goroutine, panics, timeouts, and the outcome of its result
//     (success, deferral, cancel, release, snooze, or a failure classified by ClassifyError).
//
//   - batch.go: batch kinds (NewBatchHandler): the queue loop forms batches from its claims
//     and runs each call on a (reused) batch goroutine; JobContext.
//
//   - finish.go: the completion path: batched fenced finishes checked by affected rows,
//     stale-write accounting, retries of writes the database did not answer (each try's
//     deadline doubling after a timeout: finishDeadline), CompleteTx, Outcome, SetOutput.
//
//   - donenotify.go: DoneNotifier, the done signal (jobs.Client.Wait) of what the finishes
//     ended, sent by its own goroutine after their commits, never inside them.
//
//   - heartbeat.go: batched fenced lease extensions, lease loss, stuck handlers, cancel.
//
//   - progress.go: a running job's progress, carried by the heartbeat statement.
//
//   - effect.go: the effect ledger's fenced reads and records (worker.Effect's jobLedger).
//
//   - reclaim.go: the lease-expiry sweep (LEASE_EXPIRED) and retention pruning.
//
//   - listener.go: LISTEN/NOTIFY wake-ups (new jobs, cancel requests, queue pause changes).
//
//   - pause.go: cluster-wide queue pause: the paused set is read at Start, on NOTIFY and
//     every QueueStateEvery.
//
//   - registry.go: the worker registry row and the kind defaults published at Start.
//
//   - periodicjobs.go: the periodic service (Periodic, Tick): schedules written at Start,
//     ticks enqueued once across workers.
//
//   - engineerrors.go: the engine's own statements' failures: engineError (remembered in
//     Metrics, logged through a throttle) and retryStale (stale cached plans re-run).
//
//   - fakeclock.go: FakeClock, the clock tests move by hand.
//
// docs/design.md draws the engine: its goroutines and what each owns.
package engine
