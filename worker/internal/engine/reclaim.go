package engine

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/logkey"
	"github.com/tenureq/tenure/jobs"
)

// reclaimService returns jobs whose lease expired to ready (code LEASE_EXPIRED, with the
// kind's backoff, consuming the attempt) or to dead when no attempts remain, or to cancelled
// when an operator had asked. Every worker runs it; FOR UPDATE SKIP LOCKED lets concurrent
// sweeps split the work, and the fenced FailMany (same token as the expired claim) makes a
// sweep that lost a race change nothing. Each pass handles at most ReclaimBatch jobs and
// repeats while full.
func (w *Engine) reclaimService(ctx context.Context) {
	var fp flowPruner // flow control's housekeeping (limits.go), every PruneEvery
	for {
		d := w.cfg.ReclaimEvery/2 + time.Duration(rand.Int64N(int64(w.cfg.ReclaimEvery)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		for {
			sctx, cancel := context.WithTimeout(ctx, sweepTimeout)
			n, err := w.ReclaimExpired(sctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					w.m.ReclaimErrors.Add(1)
					w.engineError(&w.reclaimLog, "reclaim sweep", err)
				}
				break
			}
			if n < w.cfg.ReclaimBatch {
				break
			}
		}
		w.maybePruneFlow(ctx, &fp)
	}
}

// ReclaimExpired runs one bounded pass of the lease-expiry sweep and returns the number of
// jobs it reclaimed. The worker runs it periodically; it is exported for operators and tests.
func (w *Engine) ReclaimExpired(ctx context.Context) (int, error) {
	if w.q == nil {
		return 0, ErrNotStarted
	}
	var n int
	err := w.retryStale(func() error { return w.reclaimOnce(ctx, &n) })
	return n, err
}

// reclaimOnce is one ReclaimExpired transaction; it sets *n to the jobs it reclaimed.
func (w *Engine) reclaimOnce(ctx context.Context, n *int) error {
	*n = 0
	dead := 0
	var ended []DoneID // the done signal of the jobs it ended (dead, cancelled), after the commit, with their dependents' signals (Settles)
	err := w.inTx(ctx, func(tx pgx.Tx) error {
		q := w.qon(tx)
		rows, err := q.LockExpired(ctx, int32(w.cfg.ReclaimBatch))
		if err != nil || len(rows) == 0 {
			return err
		}
		arg := gen.FailManyParams{}
		dead = 0
		for _, r := range rows {
			if r.FinishWaiting {
				// Its owner's finish is waiting for the row (finishLocked): the row's lock
				// had outlived the lease, and this sweep took the row in the moment it went.
				// Leave it to that finish.
				continue
			}
			state, delay := "ready", time.Duration(0)
			switch {
			case r.CancelRequested:
				state = "cancelled"
			case r.Attempts >= r.MaxAttempts:
				state = "dead"
				dead++
			default:
				delay = w.retryPolicy(r.Kind)(int(r.Attempts), CodeLeaseExpired)
			}
			arg.Ids = append(arg.Ids, r.ID)
			arg.Tokens = append(arg.Tokens, derefUUID(r.ClaimToken))
			arg.States = append(arg.States, state)
			arg.DelayUs = append(arg.DelayUs, delay.Microseconds())
			arg.Codes = append(arg.Codes, string(CodeLeaseExpired))
			arg.Messages = append(arg.Messages, "lease expired before the owner finished or heartbeated")
		}
		if len(arg.Ids) == 0 {
			return nil
		}
		got, err := q.FailMany(ctx, arg)
		if err != nil {
			return err
		}
		ended = ended[:0]
		for _, r := range got {
			if !r.Busy { // never busy here: this transaction holds the rows (LockExpired)
				*n++
				if finalState(r.State) {
					ended = append(ended, DoneID{ID: r.ID, Settles: r.Settles})
				}
			}
		}
		return nil
	})
	if err != nil {
		*n = 0
		return err
	}
	if *n > 0 { // counted once committed
		w.m.Reclaimed.Add(int64(*n))
		w.m.ReclaimedDead.Add(int64(dead))
		for range *n {
			w.m.recordCode(CodeLeaseExpired)
		}
		w.log.Info("tenure: reclaimed expired leases", logkey.Jobs, *n, "dead", dead)
	}
	if len(ended) > 0 {
		if nerr := w.sendDone(ctx, ended); nerr != nil {
			// Committed: the waiters' poll finds these jobs (engine/donenotify.go).
			w.engineError(&w.doneLog, "done signal", nerr)
		}
	}
	return err
}

// pruneService deletes final jobs past their retention, every PruneEvery (with jitter): each
// pass loops over short batches while they come back full, within half a period
// (jobs.Client.PruneExpired; one pruner at a time across processes, by advisory lock).
func (w *Engine) pruneService(ctx context.Context) {
	if w.cfg.FinishedRetention < 0 && w.cfg.DeadRetention < 0 {
		return
	}
	for {
		d := w.cfg.PruneEvery/2 + time.Duration(rand.Int64N(int64(w.cfg.PruneEvery)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		if err := w.prune(ctx); err != nil && ctx.Err() == nil {
			w.m.PruneErrors.Add(1)
			w.engineError(&w.pruneLog, "prune", err)
		}
	}
}

func (w *Engine) prune(ctx context.Context) error {
	p := jobs.PruneParams{Budget: w.cfg.PruneEvery / 2}
	if w.cfg.FinishedRetention >= 0 {
		p.FinishedBefore = time.Now().Add(-w.cfg.FinishedRetention)
	}
	if w.cfg.DeadRetention >= 0 {
		p.DeadBefore = time.Now().Add(-w.cfg.DeadRetention)
	}
	var res jobs.PruneResult
	err := w.retryStale(func() error {
		r, err := w.client.PruneExpired(ctx, p) // what a failed pass deleted stays deleted
		res.Finished, res.Dead = res.Finished+r.Finished, res.Dead+r.Dead
		return err
	})
	w.m.Pruned.Add(res.Finished + res.Dead)
	return err
}
