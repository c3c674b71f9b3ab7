package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
)

// This file is the completion path. Every finish is a fenced write (id + state='running' +
// claim_token) checked by the rows it returns. One finisher goroutine batches the finishes of
// all handlers: it takes whatever accumulated while its previous write was in flight, so the
// batch grows with load and a lone job is written at once. A finish the database rejects
// (0 rows) is a stale write: counted, logged and reported through Config.OnOutcome, never as
// success. A finish the database did not answer is retried with the same token until it lands
// or the job's lease is gone.

// Outcome reports the end of one attempt, after its fenced finish was written or rejected.
type Outcome struct {
	JobID      int64
	Kind       string
	Queue      string
	Attempt    int
	Generation int64
	// Transition is "succeeded", "retry", "dead", "cancelled" or "release".
	Transition string
	Code       ErrorCode // empty on success
	Delay      time.Duration
	// HandlerErr is what the handler returned (nil on success).
	HandlerErr error
	// Err is nil when the fenced write landed; a *StaleWriteError (errors.Is ErrLostOwnership)
	// when the database rejected it; another error when it was abandoned.
	Err error
}

func (w *Worker) enqueueFinish(e *execution) {
	if e.txCompleted.Load() {
		w.settleTxCompleted(e)
		return
	}
	w.sendFinish(e)
}

// sendFinish hands e to the finishers, unless Stop already closed them (a handler that
// ignored its context and returned after the hard-stop grace): its job was released by
// Stop, so the result is dropped, and fencing would reject it anyway.
func (w *Worker) sendFinish(e *execution) {
	w.finishMu.RLock()
	defer w.finishMu.RUnlock()
	if w.finishClosed {
		w.log.Warn("tenure: handler returned after stop; its result is discarded", "job_id", e.c.id)
		w.forget(e)
		return
	}
	w.finishCh <- e
}

// closeFinish stops accepting finishes; the finishers drain what was sent and exit.
func (w *Worker) closeFinish() {
	w.finishMu.Lock()
	w.finishClosed = true
	close(w.finishCh)
	w.finishMu.Unlock()
}

// settleTxCompleted handles a handler that called CompleteTx: if its transaction committed,
// the job is already succeeded under this token; if it rolled back, the normal finish applies.
func (w *Worker) settleTxCompleted(e *execution) {
	rows, err := w.q.FinishStates(w.bg, []int64{e.c.id})
	if err == nil && len(rows) == 1 && rows[0].State == gen.TenureJobStateSucceeded &&
		rows[0].ClaimToken != nil && *rows[0].ClaimToken == e.c.token {
		e.fin = finish{to: toSucceeded} // committed by the handler, whatever it returned after
		w.settle(e, true)
		return
	}
	w.sendFinish(e)
}

// landedEarlier reports whether the row shows that e's own finish already happened: a write
// that committed although its reply was lost, or a CompleteTx that committed.
func landedEarlier(e *execution, r gen.FinishStatesRow) bool {
	ours := r.ClaimToken != nil && *r.ClaimToken == e.c.token
	switch e.fin.to {
	case toSucceeded:
		return r.State == gen.TenureJobStateSucceeded && ours
	case toDead, toCancelled:
		return (r.State == gen.TenureJobStateDead || r.State == gen.TenureJobStateCancelled) && ours
	case toRetry:
		// The retry clears the token; it left an error entry of this generation with our code
		// (a reclaim of the same attempt would have written LEASE_EXPIRED instead). The write
		// may also have turned into dead, which keeps the token.
		if r.State == gen.TenureJobStateDead && ours {
			return true
		}
		var hist []struct {
			Generation int64  `json:"generation"`
			Code       string `json:"code"`
		}
		_ = json.Unmarshal(r.Errors, &hist)
		for _, h := range hist {
			if h.Generation == e.c.generation && h.Code == string(e.fin.code) {
				return true
			}
		}
	case toRelease:
		// A release puts the job back to ready with the generation unchanged and no error
		// entry for this generation (a reclaim would have added LEASE_EXPIRED).
		return r.Generation == e.c.generation && (r.State == gen.TenureJobStateReady || (r.State == gen.TenureJobStateCancelled && ours))
	}
	return false
}

func (w *Worker) finisher() {
	defer w.finishersWG.Done()
	max := w.cfg.MaxFinishBatch
	batch := make([]*execution, 0, max)
	for e := range w.finishCh {
		batch = append(batch[:0], e)
	drain:
		for len(batch) < max {
			select {
			case e, ok := <-w.finishCh:
				if !ok {
					break drain
				}
				batch = append(batch, e)
			default:
				break drain
			}
		}
		w.flush(batch)
	}
}

// flush writes one batch: successes in one CompleteMany, failures in one FailMany, releases in
// one ReleaseMany.
func (w *Worker) flush(batch []*execution) {
	var ok, fail, rel []*execution
	for _, e := range batch {
		switch e.fin.to {
		case toSucceeded:
			ok = append(ok, e)
		case toRelease:
			rel = append(rel, e)
		default:
			fail = append(fail, e)
		}
	}
	if len(ok) > 0 {
		w.write(ok, func(ctx context.Context, es []*execution) (map[int64]bool, error) {
			ids, tokens := idsTokens(es)
			got, err := w.q.CompleteMany(ctx, gen.CompleteManyParams{Ids: ids, Tokens: tokens})
			return idSet(got), err
		})
	}
	if len(fail) > 0 {
		w.write(fail, func(ctx context.Context, es []*execution) (map[int64]bool, error) {
			return w.failMany(ctx, w.q, es)
		})
	}
	if len(rel) > 0 {
		w.write(rel, func(ctx context.Context, es []*execution) (map[int64]bool, error) {
			ids, tokens := idsTokens(es)
			rows, err := w.q.ReleaseMany(ctx, gen.ReleaseManyParams{Ids: ids, Tokens: tokens})
			set := make(map[int64]bool, len(rows))
			for _, r := range rows {
				set[r.ID] = true
			}
			return set, err
		})
	}
}

func (w *Worker) failMany(ctx context.Context, q *gen.Queries, es []*execution) (map[int64]bool, error) {
	arg := gen.FailManyParams{}
	for _, e := range es {
		state := "ready"
		switch e.fin.to {
		case toDead:
			state = "dead"
		case toCancelled:
			state = "cancelled"
		}
		arg.Ids = append(arg.Ids, e.c.id)
		arg.Tokens = append(arg.Tokens, e.c.token)
		arg.States = append(arg.States, state)
		arg.DelayUs = append(arg.DelayUs, e.fin.delay.Microseconds())
		arg.Codes = append(arg.Codes, string(e.fin.code))
		arg.Messages = append(arg.Messages, e.fin.msg)
	}
	rows, err := q.FailMany(ctx, arg)
	set := make(map[int64]bool, len(rows))
	for _, r := range rows {
		set[r.ID] = true
	}
	return set, err
}

// write runs one fenced batch write, retrying the same write (same tokens) after database
// errors until it lands or every job's lease has run out, then settles each execution. After
// a retry, a row the write did not change may be one whose earlier attempt committed although
// its reply was lost: those are read back and settled as landed, not as stale.
func (w *Worker) write(es []*execution, run func(context.Context, []*execution) (map[int64]bool, error)) {
	sortByID(es)
	backoff := 50 * time.Millisecond
	retried := false
	for {
		start := time.Now()
		ctx, cancel := context.WithTimeout(w.bg, 30*time.Second)
		got, err := run(ctx, es)
		if err == nil && retried {
			got, err = w.readBack(ctx, es, got)
		}
		cancel()
		if err == nil {
			w.m.finishLatency.Record(time.Since(start))
			for _, e := range es {
				w.settle(e, got[e.c.id])
			}
			return
		}
		// Keep only the jobs whose lease may still hold; the others will be reclaimed.
		now := time.Now().UnixNano()
		live := es[:0]
		for _, e := range es {
			if e.leaseUntil.Load() > now && w.bg.Err() == nil {
				live = append(live, e)
				continue
			}
			w.m.finishAbandoned.Add(1)
			w.log.Error("tenure: finish abandoned: database unreachable until the lease ran out",
				"job_id", e.c.id, "transition", e.fin.to.String(), "err", err)
			w.forget(e)
			w.report(e, fmt.Errorf("tenure: finish abandoned after lease expiry: %w", err))
		}
		if len(live) == 0 {
			return
		}
		es = live
		retried = true
		w.m.finishRetries.Add(1)
		w.log.Warn("tenure: finish write failed, retrying with the same token", "jobs", len(es), "err", err)
		select {
		case <-time.After(backoff):
		case <-w.bg.Done():
		}
		backoff = min(backoff*2, w.cfg.FinishRetryMax)
	}
}

// readBack marks as landed the rows of es missing from got whose state shows that this
// attempt's own earlier write committed.
func (w *Worker) readBack(ctx context.Context, es []*execution, got map[int64]bool) (map[int64]bool, error) {
	byID := map[int64]*execution{}
	var ids []int64
	for _, e := range es {
		if !got[e.c.id] {
			byID[e.c.id] = e
			ids = append(ids, e.c.id)
		}
	}
	if len(ids) == 0 {
		return got, nil
	}
	rows, err := w.q.FinishStates(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if landedEarlier(byID[r.ID], r) {
			got[r.ID] = true
		}
	}
	return got, nil
}

// settle records the result of one fenced write.
func (w *Worker) settle(e *execution, landed bool) {
	w.forget(e)
	if !landed {
		w.m.staleRejected.Add(1)
		err := &StaleWriteError{JobID: e.c.id, Generation: e.c.generation, Transition: e.fin.to.String()}
		w.log.Warn("tenure: stale finish rejected: the job is no longer ours", "job_id", e.c.id,
			"generation", e.c.generation, "transition", e.fin.to.String())
		w.report(e, err)
		return
	}
	switch e.fin.to {
	case toSucceeded:
		w.m.succeeded.Add(1)
		w.m.lastSuccess.Store(time.Now().UnixNano())
	case toRetry:
		w.m.retried.Add(1)
	case toDead:
		w.m.dead.Add(1)
	case toCancelled:
		w.m.cancelled.Add(1)
	case toRelease:
		w.m.released.Add(1)
	}
	w.report(e, nil)
}

func (w *Worker) report(e *execution, err error) {
	if w.cfg.OnOutcome == nil {
		return
	}
	w.cfg.OnOutcome(Outcome{JobID: e.c.id, Kind: e.c.kind, Queue: e.c.queue, Attempt: e.c.attempt,
		Generation: e.c.generation, Transition: e.fin.to.String(), Code: e.fin.code, Delay: e.fin.delay,
		HandlerErr: e.fin.err, Err: err})
}

// releaseHeld gives back, with one fenced write, every job still owned at the end of Stop
// (handlers that ignored cancellation). Their late finishes are then rejected by fencing.
func (w *Worker) releaseHeld() {
	w.activeMu.Lock()
	var held []*execution
	for _, e := range w.active {
		e.released.Store(true)
		held = append(held, e)
	}
	w.activeMu.Unlock()
	if len(held) == 0 {
		return
	}
	sortByID(held)
	ctx, cancel := context.WithTimeout(w.bg, 10*time.Second)
	defer cancel()
	ids, tokens := idsTokens(held)
	rows, err := w.q.ReleaseMany(ctx, gen.ReleaseManyParams{Ids: ids, Tokens: tokens})
	if err != nil {
		w.log.Error("tenure: releasing held jobs failed; their leases will expire", "jobs", len(held), "err", err)
		return
	}
	w.m.released.Add(int64(len(rows)))
	w.log.Warn("tenure: released jobs of handlers that did not return", "jobs", len(rows))
	for _, e := range held {
		w.forget(e)
	}
}

// idsTokens returns the batch's ids and tokens. Callers sort batches by id first (sortByID):
// every multi-row fenced write locks its rows in id order, so two of them (a heartbeat and a
// finish batch) can never deadlock.
func idsTokens(es []*execution) ([]int64, []uuid.UUID) {
	ids, tokens := make([]int64, len(es)), make([]uuid.UUID, len(es))
	for i, e := range es {
		ids[i], tokens[i] = e.c.id, e.c.token
	}
	return ids, tokens
}

func sortByID(es []*execution) {
	sort.Slice(es, func(i, j int) bool { return es[i].c.id < es[j].c.id })
}

func idSet(ids []int64) map[int64]bool {
	set := make(map[int64]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// CompleteTx completes the job inside the caller's transaction: the fenced running ->
// succeeded write joins tx, so the business writes and the completion commit or roll back
// together. It returns ErrLostOwnership (wrapped in a *StaleWriteError) when the job is no
// longer owned by this attempt: roll tx back then. Call it from the job's handler with the
// handler's context; the engine sees the commit and does not finish the job again.
func CompleteTx(ctx context.Context, tx pgx.Tx, job interface{ Meta() generics.JobMeta }) error {
	e, _ := ctx.Value(execKey{}).(*execution)
	meta := job.Meta()
	if e == nil || e.c.id != meta.ID || e.c.token != meta.ClaimToken {
		return ErrNotInHandler
	}
	if err := context.Cause(e.ctx); errors.Is(err, ErrLeaseLost) {
		return &StaleWriteError{JobID: meta.ID, Generation: meta.Generation, Transition: "succeeded"}
	}
	n, err := gen.New(tx).CompleteOne(ctx, gen.CompleteOneParams{ID: meta.ID, ClaimToken: meta.ClaimToken})
	if err != nil {
		return err
	}
	if n == 0 {
		e.q.w.m.staleRejected.Add(1)
		return &StaleWriteError{JobID: meta.ID, Generation: meta.Generation, Transition: "succeeded"}
	}
	e.txCompleted.Store(true)
	return nil
}
