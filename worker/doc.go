// Package worker is Tenure's worker: it claims jobs, runs their handlers, keeps their leases
// alive, and finishes them with fenced writes that a stale worker can never win.
//
// Where things are. This package is the public API (what an application calls and
// configures); the engine behind it is worker/internal/engine (its doc.go has the file map;
// docs/design.md draws it). Files:
//
//   - worker.go: Worker, New (validates the Config and builds the engine's), Register /
//     MustRegister (a kind's handler, decoded and wrapped in its middleware, handed to the
//     engine as an engine.Handler), DeclaredOptions, Start, Stop, ReclaimExpired,
//     EngineRuntimeParams, RegisterEngineTypes and EnginePoolSize (a Config.EnginePool of
//     your own made as the private one), and the database checks at Start (privileges,
//     schema version).
//   - config.go: Config, QueueConfig, HandlerOptions, their documented defaults and
//     validation, and their conversion to the engine's configuration (engine.Config,
//     engine.KindOptions).
//   - errors.go: the error codes, the sentinel errors and error types a handler returns or a
//     caller checks (JobError, Permanent, Snooze, StaleWriteError, ...), and the one
//     classification of a handler's error (classify, verdict), which the engine calls; init
//     gives the engine these errors.
//   - middleware.go: HandlerFunc and Middleware (what wraps every handler).
//   - retry.go: RetryPolicy and FullJitter, the retry schedule decided in the application.
//   - limits.go: Limit (flow control: max running, rate, per key), its validation, PruneFlow.
//   - fairness.go: Fairness and Aging (the fairness hook's configuration; the policy is
//     engine.Policy), ErrFairShareWithLimits.
//   - batch.go: RegisterBatch, BatchOptions, JobContext (batch handlers).
//   - progress.go: Progress, ProgressEvery, ErrInvalidProgress.
//   - outcome.go: Outcome (Config.OnOutcome), CompleteTx, SetOutput, RegistryTTLIntervals.
//   - effect.go: Effect and its ledger's protocol (stable idempotency keys; the fenced
//     records are the engine's); external.go: ExternalLedger, effects recorded in another
//     engine's store.
//   - metrics.go: Stats (built from the engine's counters), Histogram, OutcomeCount.
//   - privileges.go: the privilege check at Start (PermissionError).
//   - periodic.go: periodic jobs (Config.Periodic, NewPeriodicJob, Every, Cron); the engine's
//     periodic service enqueues each tick once across workers.
//   - workflow.go: DependencyOutput, a workflow task's typed read of its dependencies' outputs.
//     The engine has no workflow code: dependents are released by the database (the trigger
//     jobs_settle_dependents, migration 0020) in the transaction of the finish that resolves them.
//
// The handler-side helpers (Progress, SetOutput, Effect, CompleteTx, DependencyOutput,
// JobContext) reach the running attempt through the engine's one context key
// (engine.ExecutionFrom).
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
