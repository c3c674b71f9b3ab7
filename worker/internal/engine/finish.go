package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/logkey"
)

// This file is the completion path. Every finish is a fenced write (id + state='running' +
// claim_token) checked by the rows it returns. One finisher goroutine batches the finishes of
// all handlers: it takes whatever accumulated while its previous write was in flight, so the
// batch grows with load and a lone job is written at once. A finish the database rejects
// (0 rows) is a stale write: counted, logged and reported through Config.OnOutcome, never as
// success. A finish the database did not answer is retried with the same token until it lands
// or the job's lease is gone.

// Outcome is one attempt's settled finish, as the engine reports it to Config.OnOutcome
// (worker.Outcome documents the fields).
type Outcome struct {
	Job        *generics.JobRow
	Transition string
	Code       ErrorCode
	Delay      time.Duration
	HandlerErr error
	Err        error
}

// landedEarlier reports whether the row shows that e's own finish already happened: a write
// that committed although its reply was lost, or a CompleteTx that committed.
func landedEarlier(e *Execution, r gen.FinishStatesRow) bool {
	ours := r.ClaimToken != nil && *r.ClaimToken == e.c.token
	if e.txCompleted.Load() && r.State == gen.TenureJobStateSucceeded && ours {
		// CompleteTx committed inside the handler's transaction, whatever the handler
		// returned after it: that is this attempt's success.
		e.fin = finish{to: toSucceeded}
		return true
	}
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
			if h.Generation == e.c.Generation && h.Code == string(e.fin.code) {
				return true
			}
		}
	case toRelease, toSnooze:
		// A release or snooze puts the job back to ready with the generation unchanged and no
		// error entry for this generation (a reclaim would have added LEASE_EXPIRED).
		return r.Generation == e.c.Generation && (r.State == gen.TenureJobStateReady || (r.State == gen.TenureJobStateCancelled && ours))
	}
	return false
}

// finishLingerTarget is the batch size at which the batcher stops lingering (FinishLinger).
const finishLingerTarget = 16

// Awaited jobs: the ids a jobs.Client announced on the await channel (jobs/wait.go; the
// listener forwards them on awaitCh). The batcher keeps them for at least awaitKeep (at most
// twice as long: two generations of a map, the older dropped when the newer is awaitKeep old or
// holds awaitMax ids); a client re-announces the ids it still waits for every 20 s.
const (
	awaitKeep   = 30 * time.Second
	awaitMax    = 100_000
	awaitBuffer = 64 // announcements (of up to 350 ids each) the listener may hold for the batcher
)

// awaitSet is the batcher's memory of awaited ids (owned by the batcher goroutine alone).
type awaitSet struct {
	cur, prev map[int64]struct{}
	since     time.Time // when cur began
}

func (a *awaitSet) add(id int64, now time.Time) {
	if a.cur == nil || now.Sub(a.since) >= awaitKeep || len(a.cur) >= awaitMax {
		a.prev, a.cur, a.since = a.cur, make(map[int64]struct{}), now
	}
	a.cur[id] = struct{}{}
}

func (a *awaitSet) empty() bool { return len(a.cur) == 0 && len(a.prev) == 0 }

// take reports whether id is awaited; a final finish forgets it (a retry's next attempt is
// still awaited).
func (a *awaitSet) take(id int64, final bool) bool {
	_, inCur := a.cur[id]
	_, inPrev := a.prev[id]
	if final {
		delete(a.cur, id)
		delete(a.prev, id)
	}
	return inCur || inPrev
}

// final reports whether the transition ends the job (what a waiter waits for).
func (t transition) final() bool { return t == toSucceeded || t == toDead || t == toCancelled }

// batcher is the one goroutine that owns the finish batch being collected. It takes the
// finishes the queue loops hand over (finishCh) and gives a batch to a free finisher (writeCh)
// once it is worth writing: 16 finishes, FinishLinger after its first one, a limited job's
// finish (it frees room: limits.go), a finish that already waited FinishLinger for a claim to
// carry it (claim.go, "Completions ride on claims"), the finish of a job a jobs.Client waits
// for (announced on the await channel, awaitCh: a waiter does not pay the linger), or Stop has
// begun. While every finisher is writing it keeps
// collecting, up to MaxFinishBatch, so the next write takes everything that accumulated during
// the previous ones. One collector means one lingering batch: with a lingering finisher each,
// the finishers split a low rate between them and each wrote half as many jobs per statement.
// It runs until the engine context ends (after every loop has returned, or at Stop's deadline).
func (w *Engine) batcher(ctx context.Context) {
	max := w.cfg.MaxFinishBatch
	batch := make([]*Execution, 0, max)
	urgent, due := false, false
	linger := w.clk.NewTimer(time.Hour)
	linger.Stop()
	var lingerC <-chan time.Time
	var awaited awaitSet
	for {
		in := w.finishCh
		if len(batch) >= max {
			in = nil // full: the queue loops keep the rest pending until a finisher takes this
		}
		var out chan<- []*Execution
		if len(batch) > 0 && (due || urgent || w.cfg.FinishLinger <= 0 || len(batch) >= finishLingerTarget || w.stopping.Load()) {
			out = w.writeCh
		}
		select {
		case <-ctx.Done():
			linger.Stop()
			return
		case e := <-in:
			if len(batch) == 0 && w.cfg.FinishLinger > 0 {
				linger.Reset(w.cfg.FinishLinger)
				lingerC = linger.C()
			}
			batch = append(batch, e)
			urgent = urgent || e.limited || e.lingered
			if !awaited.empty() && awaited.take(e.c.ID, e.fin.to.final()) {
				urgent = true
				w.m.AwaitedFinishes.Add(1)
			}
		case ids := <-w.awaitCh:
			now := w.clk.Now()
			for _, id := range ids {
				awaited.add(id, now)
			}
			// A finish already collected (its job announced after its handler returned)
			// leaves now. Past finishLingerTarget the batch leaves anyway.
			if len(batch) < finishLingerTarget {
				for _, e := range batch {
					if awaited.take(e.c.ID, e.fin.to.final()) {
						urgent = true
						w.m.AwaitedFinishes.Add(1)
					}
				}
			}
		case out <- batch:
			batch, urgent, due = make([]*Execution, 0, max), false, false
			linger.Stop()
			lingerC = nil
		case <-lingerC:
			due, lingerC = true, nil
		}
	}
}

// finisher is one of Config.Finishers goroutines shared by all queues: it writes the batches
// the batcher gives it, in batches per transition, and reports each result to the execution's
// queue loop. It runs until the engine context ends.
func (w *Engine) finisher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case batch := <-w.writeCh:
			w.flush(ctx, batch)
		}
	}
}

// settleTo reports results to their queue loops: one send per queue, however many results,
// in the order the queues first appear. (Grouped in one pass: splitting the rest off for each
// queue in turn was quadratic when a batch spans hundreds of queues.)
func (w *Engine) settleTo(ctx context.Context, ss ...settled) {
	if len(ss) == 0 {
		return
	}
	var order []*queue
	byQueue := make(map[*queue][]settled)
	for _, s := range ss {
		q := s.e.q
		if _, ok := byQueue[q]; !ok {
			order = append(order, q)
		}
		byQueue[q] = append(byQueue[q], s)
	}
	for _, q := range order {
		select {
		case q.settledCh <- byQueue[q]:
		case <-q.done:
		case <-ctx.Done():
			return
		}
	}
}

// flush writes one batch: successes in one CompleteMany (with their outputs), failures in one
// FailMany, releases in one ReleaseMany, snoozes in one SnoozeMany. Each statement skips rows
// another session holds locked and returns them busy: writeSorted hands those to finishLocked.
func (w *Engine) flush(ctx context.Context, batch []*Execution) {
	var ok, fail, rel, snooze []*Execution
	for _, e := range batch {
		switch e.fin.to {
		case toSucceeded:
			ok = append(ok, e)
		case toRelease:
			rel = append(rel, e)
		case toSnooze:
			snooze = append(snooze, e)
		default:
			fail = append(fail, e)
		}
	}
	if len(ok) > 0 {
		w.write(ctx, ok, completeMany)
	}
	if len(snooze) > 0 {
		w.write(ctx, snooze, snoozeMany)
	}
	if len(fail) > 0 {
		w.write(ctx, fail, failMany)
	}
	if len(rel) > 0 {
		w.write(ctx, rel, releaseMany)
	}
}

// finishResult is what a fenced batch write reports: the rows it changed (landed), and the
// rows it skipped because another session holds them locked (busy: still this attempt's as the
// statement's snapshot saw them). A row in neither is a stale write, or one that an earlier try
// already wrote (readBack). final holds the done-signal entries of the landed rows that
// reached a final state (DoneID), sent after the write returns (w.done).
type finishResult struct {
	landed, busy map[int64]bool
	final        map[int64]DoneID
}

func newFinishResult(n int) finishResult {
	return finishResult{landed: make(map[int64]bool, n), busy: map[int64]bool{}, final: make(map[int64]DoneID, n)}
}

// add records one returned row: busy, or landed in state (final states get a done entry;
// deleted: the row was deleted on success; settles: the row has dependents, whose signals the
// done notifier sends too, DoneID.Settles).
func (r finishResult) add(id int64, busy bool, state gen.TenureJobState, deleted, settles bool) {
	if busy {
		r.busy[id] = true
		return
	}
	r.landed[id] = true
	if finalState(state) {
		r.final[id] = DoneID{ID: id, Deleted: deleted, Settles: settles}
	}
}

// doneEntries are the done-signal entries of what the write ended.
func (r finishResult) doneEntries() []DoneID {
	if len(r.final) == 0 {
		return nil
	}
	out := make([]DoneID, 0, len(r.final))
	for _, e := range r.final {
		out = append(out, e)
	}
	return out
}

func finalState(s gen.TenureJobState) bool {
	return s == gen.TenureJobStateSucceeded || s == gen.TenureJobStateDead || s == gen.TenureJobStateCancelled
}

func completeMany(ctx context.Context, q *gen.Queries, es []*Execution) (finishResult, error) {
	ids, tokens := idsTokens(es)
	outputs, progress := outputsProgress(es)
	rows, err := q.CompleteMany(ctx, gen.CompleteManyParams{Ids: ids, Tokens: tokens, Outputs: outputs, Progress: progress,
		Deletes: deletes(es)})
	res := newFinishResult(len(rows))
	for _, r := range rows {
		res.add(r.ID, r.Busy, gen.TenureJobStateSucceeded, r.Deleted, r.Settles)
	}
	return res, err
}

// deletes are the delete-on-success flags of es for CompleteMany (HandlerOptions.DeleteOnSuccess),
// nil when no job of es deletes.
func deletes(es []*Execution) []bool {
	var out []bool
	for i, e := range es {
		if e.deleteOnSuccess() {
			if out == nil {
				out = make([]bool, len(es))
			}
			out[i] = true
		}
	}
	return out
}

// outputsProgress are the outputs (SetOutput) and last progress (Progress) of es for a batched
// finish: JSON null for none; progress is nil when no job of es has any.
func outputsProgress(es []*Execution) (outputs, progress [][]byte) {
	outputs = make([][]byte, len(es))
	for i, e := range es {
		outputs[i] = jsonNull
		if o := e.output.Load(); o != nil {
			outputs[i] = *o
		}
		if p := e.prog.last(); p != nil {
			if progress == nil {
				progress = make([][]byte, len(es))
				for j := range progress {
					progress[j] = jsonNull
				}
			}
			progress[i] = p
		}
	}
	return outputs, progress
}

func snoozeMany(ctx context.Context, q *gen.Queries, es []*Execution) (finishResult, error) {
	ids, tokens := idsTokens(es)
	gens, delays := make([]int64, len(es)), make([]int64, len(es))
	for i, e := range es {
		gens[i], delays[i] = e.c.Generation, e.fin.delay.Microseconds()
	}
	rows, err := q.SnoozeMany(ctx, gen.SnoozeManyParams{Ids: ids, Tokens: tokens, Generations: gens, DelayUs: delays})
	res := newFinishResult(len(rows))
	for _, r := range rows {
		res.add(r.ID, r.Busy, r.State, false, r.Settles)
	}
	return res, err
}

func releaseMany(ctx context.Context, q *gen.Queries, es []*Execution) (finishResult, error) {
	ids, tokens := idsTokens(es)
	delays := make([]int64, len(es))
	for i, e := range es {
		delays[i] = e.fin.delay.Microseconds()
	}
	rows, err := q.ReleaseMany(ctx, gen.ReleaseManyParams{Ids: ids, Tokens: tokens, DelayUs: delays})
	res := newFinishResult(len(rows))
	for _, r := range rows {
		res.add(r.ID, r.Busy, r.State, false, r.Settles)
	}
	return res, err
}

func failMany(ctx context.Context, q *gen.Queries, es []*Execution) (finishResult, error) {
	arg := gen.FailManyParams{}
	for _, e := range es {
		state := "ready"
		switch e.fin.to {
		case toDead:
			state = "dead"
		case toCancelled:
			state = "cancelled"
		}
		arg.Ids = append(arg.Ids, e.c.ID)
		arg.Tokens = append(arg.Tokens, e.c.token)
		arg.States = append(arg.States, state)
		arg.DelayUs = append(arg.DelayUs, e.fin.delay.Microseconds())
		arg.Codes = append(arg.Codes, string(e.fin.code))
		arg.Messages = append(arg.Messages, e.fin.msg)
	}
	// A failed attempt's output and last progress go to its entry of the error history.
	arg.Outputs, arg.Progress = outputsProgress(es)
	rows, err := q.FailMany(ctx, arg)
	res := newFinishResult(len(rows))
	for _, r := range rows {
		res.add(r.ID, r.Busy, r.State, false, r.Settles)
	}
	return res, err
}

// fencedWrite runs one fenced batch statement on q and reports what it changed.
type fencedWrite func(context.Context, *gen.Queries, []*Execution) (finishResult, error)

// maxFinishAttempts bounds how often one finish batch is tried (retryable errors only).
const maxFinishAttempts = 10

// write runs one fenced batch write and settles each execution.
//
// What happens on error depends on its class (ClassifyWriteError):
//   - retryable (the connection broke, the server restarted or is read-only for a moment,
//     a serialization failure): the same write, with the same tokens, is retried with backoff
//     while some job's lease may still hold, at most maxFinishAttempts times; after a retry,
//     rows the write did not change are read back, since an earlier try may have committed
//     although its reply was lost;
//   - data or constraint errors (SQLSTATE classes 22, 23): nothing was written; the batch is
//     split in halves so that one row cannot block the others, down to the row at fault;
//   - anything else, or a retry budget used up: abandoned. The job stays running until its
//     lease expires and the sweep retries it (LEASE_EXPIRED); the outcome reports the error.
func (w *Engine) write(ctx context.Context, es []*Execution, run fencedWrite) {
	sortByID(es)
	w.writeSorted(ctx, es, run)
}

func (w *Engine) writeSorted(ctx context.Context, es []*Execution, run fencedWrite) {
	backoff := 50 * time.Millisecond
	readBack := false
	for _, e := range es {
		// A completion that rode on a failed claim may have committed with it (claim.go).
		readBack = readBack || e.txCompleted.Load() || e.rideFailed
	}
	timedOut := 0
	for attempt := 1; ; attempt++ {
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, w.finishDeadline(timedOut))
		var res finishResult
		err := w.retryStale(func() (err error) {
			res, err = run(wctx, w.q, es)
			return err
		})
		if err == nil && readBack {
			err = w.retryStale(func() error { return w.readBack(wctx, es, res) })
		}
		if err != nil && ranOutOfTime(ctx, wctx) {
			timedOut++
		}
		cancel()
		if err == nil {
			w.m.FinishLatency.Record(time.Since(start))
			w.done.Add(res.doneEntries()) // before the settles: Stop's last send follows them
			ss := make([]settled, 0, len(es))
			var busy []*Execution
			for _, e := range es {
				if res.busy[e.c.ID] {
					busy = append(busy, e) // its row is locked: it waits, the batch does not
					continue
				}
				ss = append(ss, settled{e: e, landed: res.landed[e.c.ID]})
			}
			w.settleTo(ctx, ss...)
			if len(busy) > 0 {
				w.spawn(func() { w.writeBusy(ctx, busy, run) })
			}
			return
		}
		if ctx.Err() != nil {
			w.abandon(ctx, es, err)
			return
		}
		switch ClassifyWriteError(err) {
		case WriteData:
			if len(es) == 1 {
				w.abandon(ctx, es, fmt.Errorf("the database refused the row: %w", err))
				return
			}
			w.m.FinishSplits.Add(1)
			h := len(es) / 2
			w.writeSorted(ctx, es[:h], run)
			w.writeSorted(ctx, es[h:], run)
			return
		case WriteFatal:
			w.abandon(ctx, es, err)
			return
		}
		// Retryable: keep only the jobs whose lease may still hold; the others will be
		// reclaimed by the sweep.
		now := time.Now().UnixNano()
		live := es[:0:0]
		var gone []*Execution
		for _, e := range es {
			e.finishFails.Add(1)
			if e.leaseUntil.Load() > now && attempt < maxFinishAttempts {
				live = append(live, e)
			} else {
				gone = append(gone, e)
			}
		}
		if len(gone) > 0 {
			w.abandon(ctx, gone, fmt.Errorf("database unreachable for %d tries or until the lease ran out: %w", attempt, err))
		}
		if len(live) == 0 {
			return
		}
		es = live
		readBack = true
		w.m.FinishRetries.Add(1)
		w.engineError(&w.finishLog, "finish write (retried with the same token)", err, logkey.Jobs, len(es), logkey.Try, attempt)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, w.cfg.FinishRetryMax)
	}
}

// maxFinishDeadline bounds the deadline of a finish write's try (finishDeadline).
const maxFinishDeadline = 5 * time.Minute

// finishDeadline is the deadline of a finish write's try after timedOut earlier tries of the
// same write ran out of time: finishTimeout, doubled per such try, at most maxFinishDeadline.
// A fixed deadline turns a finish that needs longer into a livelock: the finish of a workflow
// task that releases 100,000 dependents is one statement of 5–8 s here, more on a slower or
// busier server; cancelled at every try, it would be abandoned, its lease would expire and its
// handler would run again, to be cancelled again. finishTimeout stays the first try's
// deadline, so a dead connection still costs seconds.
func (w *Engine) finishDeadline(timedOut int) time.Duration {
	return min(w.firstFinishDeadline()<<min(timedOut, 8), maxFinishDeadline)
}

// ranOutOfTime reports whether a write under wctx failed because wctx's own deadline passed
// (not the engine's context, which ends at Stop).
func ranOutOfTime(ctx, wctx context.Context) bool {
	return ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded)
}

// busyRetryDelay is how long writeBusy waits before it tries the busy rows of a batch again.
const busyRetryDelay = 20 * time.Millisecond

// writeBusy finishes the jobs a batched finish returned busy. Most often the lock was this
// worker's own heartbeat's, held for the moment of its statement: one more batched try after
// busyRetryDelay writes those. A row still busy then is held by another session's transaction:
// its finish waits for that row alone (finishLocked).
func (w *Engine) writeBusy(ctx context.Context, es []*Execution, run fencedWrite) {
	select {
	case <-time.After(busyRetryDelay):
	case <-ctx.Done():
		w.abandon(ctx, es, fmt.Errorf("waiting for another session's lock on the row: %w", ctx.Err()))
		return
	}
	res := newFinishResult(len(es))
	wctx, cancel := context.WithTimeout(ctx, w.firstFinishDeadline())
	err := w.retryStale(func() (err error) {
		res, err = run(wctx, w.q, es)
		return err
	})
	if err == nil {
		// A row neither landed nor busy now: stale, unless a CompleteTx committed meanwhile.
		err = w.retryStale(func() error { return w.readBack(wctx, es, res) })
	}
	cancel()
	if err == nil {
		w.done.Add(res.doneEntries())
	}
	ss := make([]settled, 0, len(es))
	for _, e := range es {
		if err != nil || res.busy[e.c.ID] {
			w.finishLocked(ctx, e, run) // it retries what failed here, with the same token
			continue
		}
		ss = append(ss, settled{e: e, landed: res.landed[e.c.ID]})
	}
	w.settleTo(ctx, ss...)
}

// lockWaiters bounds the engine connections that wait on other sessions' row locks at once
// (finishLocked); the others queue for them, so locked rows cannot take the engine pool.
const lockWaiters = 2

// lockWaitTimeout bounds one wait for a locked row (lock_timeout): the waiter then lets the
// next locked row take its turn, and tries again.
const lockWaitTimeout = 5 * time.Second

// finishLocked writes the finish of one job whose row another session holds locked (an
// operator's or the application's open transaction: a batched finish skipped it and returned
// it busy). On its own goroutine it waits for that row alone (LockFinish, fenced like the
// finish: a row no longer this attempt's is not waited for) and writes the finish in the same
// transaction, so the lock delays only this job. Its queued lock request keeps the sweep (SKIP
// LOCKED) off the row when the other session ends, so the finish lands first even if the
// lease ran out meanwhile (nobody can extend a locked row); the fence still decides. It waits
// until the finish is written, the row is no longer this attempt's, or the engine stops.
func (w *Engine) finishLocked(ctx context.Context, e *Execution, run fencedWrite) {
	w.m.FinishBusy.Add(1)
	w.spawn(func() {
		one := []*Execution{e}
		ids, tokens := idsTokens(one)
		backoff := 50 * time.Millisecond
		timedOut := 0
		for fails := 0; ; {
			select {
			case w.lockWait <- struct{}{}:
			case <-ctx.Done():
				w.abandon(ctx, one, fmt.Errorf("waiting for another session's lock on the row: %w", ctx.Err()))
				return
			}
			res, owned := newFinishResult(1), true
			wctx, cancel := context.WithTimeout(ctx, w.finishDeadline(timedOut))
			err := w.retryStale(func() error {
				return pgx.BeginFunc(wctx, w.eng, func(tx pgx.Tx) error {
					if _, err := tx.Exec(wctx, lockWaitSQL); err != nil {
						return err
					}
					q := w.qon(tx)
					got, err := q.LockFinish(wctx, gen.LockFinishParams{Ids: ids, Tokens: tokens})
					if err != nil {
						return err
					}
					if owned = len(got) == 1; !owned {
						return nil
					}
					res, err = run(wctx, q, one)
					return err
				})
			})
			if err == nil && !owned {
				// No longer this attempt's: a stale write, unless an earlier write landed.
				err = w.retryStale(func() error { return w.readBack(wctx, one, res) })
			}
			if err != nil && ranOutOfTime(ctx, wctx) {
				timedOut++
			}
			cancel()
			<-w.lockWait
			var pgErr *pgconn.PgError
			switch {
			case err == nil && !res.busy[e.c.ID]:
				w.done.Add(res.doneEntries())
				w.settleTo(ctx, settled{e: e, landed: res.landed[e.c.ID]})
				return
			case err == nil, errors.As(err, &pgErr) && pgErr.Code == "55P03":
				continue // still locked: wait again
			case ctx.Err() != nil:
				w.abandon(ctx, one, err)
				return
			}
			if ClassifyWriteError(err) != WriteRetry {
				w.abandon(ctx, one, err)
				return
			}
			e.finishFails.Add(1)
			if fails++; fails >= maxFinishAttempts {
				w.abandon(ctx, one, fmt.Errorf("database unreachable for %d tries: %w", fails, err))
				return
			}
			w.m.FinishRetries.Add(1)
			w.engineError(&w.finishLog, "finish write of a locked row (retried with the same token)", err, logkey.Jobs, 1, logkey.Try, fails)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			backoff = min(backoff*2, w.cfg.FinishRetryMax)
		}
	})
}

// lockWaitSQL sets finishLocked's lock wait bound for its transaction.
var lockWaitSQL = fmt.Sprintf("SET LOCAL lock_timeout = %d", lockWaitTimeout.Milliseconds())

// abandon reports executions whose finish will not be written.
func (w *Engine) abandon(ctx context.Context, es []*Execution, err error) {
	ss := make([]settled, len(es))
	for i, e := range es {
		ss[i] = settled{e: e, err: fmt.Errorf("%w: %w", ErrFinishAbandoned, err)}
	}
	w.settleTo(ctx, ss...)
}

// readBack marks as landed the rows of es that res reports neither landed nor busy and whose
// state shows that this attempt's own earlier write committed.
func (w *Engine) readBack(ctx context.Context, es []*Execution, res finishResult) error {
	byID := map[int64]*Execution{}
	var ids []int64
	for _, e := range es {
		if !res.landed[e.c.ID] && !res.busy[e.c.ID] {
			byID[e.c.ID] = e
			ids = append(ids, e.c.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := w.q.FinishStates(ctx, ids)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if e := byID[r.ID]; landedEarlier(e, *r) {
			res.landed[r.ID] = true
			if finalState(r.State) && !e.txCompleted.Load() {
				// Its commit's reply was lost, and with it the done signal that follows it
				// (a CompleteTx's signal went with the handler's transaction). Whether it had
				// dependents is not read back: Settles costs at most an empty look-up.
				res.final[r.ID] = DoneID{ID: r.ID, Settles: true}
			}
		}
		delete(byID, r.ID)
	}
	// The rows gone. A CompleteTx that deleted the row (delete on success) landed when the
	// handler's transaction committed, which txid_status tells. Any other missing row is not
	// reported as success: after a lost reply, a delete of this attempt's own earlier try
	// cannot be told from another attempt's (after this one's lease ran out), so it counts
	// as a stale write (docs/design.md "Delete on success").
	for id, e := range byID {
		if !e.txCompleted.Load() || !e.txDeleted.Load() {
			continue
		}
		st, err := w.q.TxStatus(ctx, e.txXid.Load())
		if err != nil {
			return err
		}
		if st == "committed" {
			e.fin = finish{to: toSucceeded}
			res.landed[id] = true
		}
	}
	return nil
}

func (w *Engine) report(e *Execution, err error) {
	if w.cfg.OnOutcome == nil {
		return
	}
	w.cfg.OnOutcome(Outcome{Job: e.c.JobRow, Transition: e.fin.to.String(), Code: e.fin.code, Delay: e.fin.delay,
		HandlerErr: e.fin.err, Err: err})
}

// idsTokens returns the batch's ids and tokens. Callers sort batches by id first (sortByID):
// every multi-row fenced write locks its rows in id order, so two of them (a heartbeat and a
// finish batch) can never deadlock.
func idsTokens(es []*Execution) ([]int64, []uuid.UUID) {
	ids, tokens := make([]int64, len(es)), make([]uuid.UUID, len(es))
	for i, e := range es {
		ids[i], tokens[i] = e.c.ID, e.c.token
	}
	return ids, tokens
}

func sortByID(es []*Execution) {
	sort.Slice(es, func(i, j int) bool { return es[i].c.ID < es[j].c.ID })
}

// CompleteTx is worker.CompleteTx: the fenced running -> succeeded write of the attempt
// running in ctx, in the caller's transaction tx.
func CompleteTx(ctx context.Context, tx pgx.Tx, job *generics.JobRow) error {
	e := ExecutionFrom(ctx)
	if !e.owns(job) {
		return ErrNotInHandler
	}
	var output []byte
	if o := e.output.Load(); o != nil {
		output = *o
	}
	// No check of the lease before the statement: the engine may cancel the handler's context
	// for a lost lease at any moment, also while the statement is on its way or running, and
	// one check after it covers every such moment (leaseLostErr).
	r, err := e.q.w.qon(tx).CompleteOne(ctx, gen.CompleteOneParams{ID: e.c.ID, ClaimToken: e.c.token, Output: output,
		Progress: e.prog.last(), Delete: e.deleteOnSuccess()})
	if err == nil && r.Changed == 1 {
		// A deleted row cannot tell the engine later whether tx committed: its transaction id
		// can (readBack asks txid_status).
		e.txXid.Store(r.Xid)
		e.txDeleted.Store(r.Deleted)
		e.txCompleted.Store(true)
		return nil
	}
	if err == nil || leaseLostErr(e.ctx, err) {
		e.q.w.m.StaleRejected.Add(1)
		return NewStaleWriteError(e.c.ID, e.c.Generation, "succeeded")
	}
	return err
}

// leaseLostErr reports whether err, from a statement run on a handler's context, failed once
// the engine had cancelled that context for a lost lease: pgx then reports a cancelled
// statement or a context already done, but what the handler must learn is that the job is no
// longer its own.
func leaseLostErr(handlerCtx context.Context, err error) bool {
	return err != nil && errors.Is(context.Cause(handlerCtx), ErrLeaseLost)
}

// jsonNull is the CompleteMany output of a job whose handler recorded none.
var jsonNull = []byte("null")

// SetOutput records b, a JSON encoding package worker checked (worker.SetOutput), as the
// output of the attempt; nil records none.
func (e *Execution) SetOutput(b []byte) {
	if b == nil {
		e.output.Store(nil)
		return
	}
	e.output.Store(&b)
}

// doneLastSend bounds the done notifier's last send, when the engine stops.
const doneLastSend = time.Second

// sendDone sends done-signal entries in one autocommitted statement (NotifyDoneMany), after the
// commits that ended their jobs (engine/donenotify.go explains why never inside them).
// The entries that Settle also name jobs whose dependents the finish released or cancelled
// without a signal (tenure.settle_jobs, migration 0029): then NotifyDoneSettled, the same
// statement with a read of what those dependents are now, sends their wake-up and done signals
// too; without such entries NotifyDoneMany alone (plain jobs pay nothing for the read).
func (w *Engine) sendDone(ctx context.Context, entries []DoneID) error {
	payloads := DonePayloads(entries)
	if len(payloads) == 0 {
		return nil
	}
	settled := DoneSettled(entries)
	ctx, cancel := context.WithTimeout(ctx, w.firstFinishDeadline())
	defer cancel()
	return w.retryStale(func() error {
		if len(settled) == 0 {
			_, err := w.q.NotifyDoneMany(ctx, payloads)
			return err
		}
		_, err := w.q.NotifyDoneSettled(ctx, gen.NotifyDoneSettledParams{Payloads: payloads, Settled: settled})
		return err
	})
}
