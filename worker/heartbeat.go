package worker

import (
	"context"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/logkey"
)

// This file is the heartbeat, run by each queue loop for its own jobs. Every heartbeatTick the
// loop batches the jobs whose heartbeat is due (each every lease/HeartbeatDivisor) into one
// fenced statement, at most one in flight. A job the statement does not return has lost its
// lease: its handler's context is cancelled with cause ErrLeaseLost. Two failed statements in
// a row do the same, since the engine can no longer vouch for the lease. The statement never
// waits on a row lock: a job whose row another session holds locked is returned not extended
// and tried again at half the interval, and it loses its lease only if the lease runs out
// first, so one locked row cannot hold back (and time out) the heartbeat of every other job. The loop also
// declares handlers stuck once they run past their timeout plus StuckGrace: their jobs are no
// longer heartbeated, so the lease expires and the job is reclaimed; a heartbeat never keeps a
// hung handler's job running. Nor does it keep alive a returned handler's job whose finish has
// failed maxHeartbeatedFinishFails times: its lease then runs out and the sweep retries it.

// maxHeartbeatedFinishFails is how many failed finish writes a returned job keeps its lease.
const maxHeartbeatedFinishFails = 3

// heartbeat runs on the loop: it declares stuck handlers and starts the due heartbeats.
func (q *queue) heartbeat(ctx context.Context, now time.Time) {
	w := q.w
	all := q.hbAll
	var due []*execution
	for e := range q.active {
		if e.released || e.leaseLost || e.stuck {
			continue
		}
		if !e.returned && e.h != nil && now.After(e.start.Add(e.h.opts.Timeout+w.cfg.StuckGrace)) {
			q.declareStuck(e, now)
			continue
		}
		// A job completed inside its handler's transaction needs no more lease, and that
		// transaction holds the row lock until it ends: heartbeating it would only wait.
		if e.txCompleted.Load() || e.finishFails.Load() >= maxHeartbeatedFinishFails {
			continue
		}
		if all || !now.Before(e.nextHB) || e.prog.due(now) {
			due = append(due, e)
		}
	}
	if len(due) == 0 || q.hbInFlight {
		return
	}
	q.hbAll = false
	q.hbInFlight = true
	sortByID(due)
	ids, tokens := idsTokens(due)
	// The progress the handlers reported since the last write rides on this statement
	// (progress.go); JSON null leaves a job's progress as it is.
	var progress [][]byte
	for i, e := range due {
		if p := e.prog.take(now); string(p) != string(jsonNull) {
			if progress == nil {
				progress = make([][]byte, len(due))
				for j := range progress {
					progress[j] = jsonNull
				}
			}
			progress[i] = p
		}
	}
	w.spawn(func() {
		hctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
		var rows []gen.HeartbeatRow
		err := w.retryStale(func() (err error) {
			rows, err = w.q.Heartbeat(hctx, gen.HeartbeatParams{Ids: ids, Tokens: tokens, Progress: progress})
			return err
		})
		cancel()
		select {
		case q.hbCh <- hbResult{due: due, at: now, rows: rows, err: err}:
		case <-q.done:
		}
	})
}

// heartbeatDone applies a heartbeat's result on the loop.
func (q *queue) heartbeatDone(r hbResult) {
	w := q.w
	q.hbInFlight = false
	w.m.heartbeats.Add(1)
	for _, e := range r.due {
		e.prog.settled(r.err != nil)
	}
	if r.err != nil {
		if w.engCtx.Err() != nil {
			return
		}
		w.m.heartbeatErrors.Add(1)
		w.engineError(&w.heartbeatLog, "heartbeat", r.err, logkey.Queue, q.name, logkey.Jobs, len(r.due))
		for _, e := range r.due {
			if _, ok := q.active[e]; !ok {
				continue
			}
			e.hbFails++
			if e.hbFails >= 2 {
				q.loseLease(e, "two consecutive heartbeats failed")
				continue
			}
			// retry soon, well before the lease ends
			e.nextHB = r.at.Add(e.c.Lease / time.Duration(2*w.cfg.HeartbeatDivisor))
		}
		return
	}
	// Every job the statement returned is still this attempt's: extended, or busy (another
	// session holds its row locked, so the statement skipped it rather than wait).
	extended := make(map[int64]bool, len(r.rows))
	cancelled := map[int64]bool{}
	var n int64
	for _, row := range r.rows {
		extended[row.ID] = row.Extended
		if row.Extended {
			n++
		}
		if row.CancelRequested {
			cancelled[row.ID] = true
		}
	}
	w.m.heartbeatRows.Add(n)
	for _, e := range r.due {
		if _, ok := q.active[e]; !ok {
			continue // settled meanwhile
		}
		if cancelled[e.c.ID] {
			q.requestCancel(e)
		}
		ext, owned := extended[e.c.ID]
		switch {
		case ext:
			e.hbFails = 0
			e.leaseUntil.Store(r.at.Add(e.c.Lease).UnixNano())
			e.nextHB = r.at.Add(e.c.Lease / time.Duration(w.cfg.HeartbeatDivisor))
		case e.returned:
			// The handler returned and its finish raced this heartbeat (the finish committed
			// first, or holds the row): the finish path settles the job, stale or not.
		case !owned:
			q.loseLease(e, "heartbeat changed 0 rows")
		case r.at.UnixNano() >= e.leaseUntil.Load():
			// Busy until its lease ran out: the sweep may reclaim it once the lock goes.
			q.loseLease(e, "lease ran out while another session held the job's row locked")
		default:
			// Busy: still ours, not extended. Try again soon, well before the lease ends; the
			// lease is lost only if it runs out first.
			e.nextHB = r.at.Add(e.c.Lease / time.Duration(2*w.cfg.HeartbeatDivisor))
		}
	}
}

func (q *queue) loseLease(e *execution, why string) {
	if e.leaseLost {
		return
	}
	e.leaseLost = true
	q.w.m.leasesLost.Add(1)
	q.w.log.Warn("tenure: lease lost, cancelling handler", e.c.logAttrs("why", why)...)
	e.leaseUntil.Store(0)
	e.cancel(ErrLeaseLost)
}

// declareStuck gives a hung handler's slot back and stops heartbeating its job.
func (q *queue) declareStuck(e *execution, now time.Time) {
	e.stuck = true
	q.running--
	q.w.m.stuck.Add(1)
	q.w.log.Error("tenure: handler stuck past timeout+grace; no more heartbeats, its job will be reclaimed when the lease expires",
		e.c.logAttrs("running_for", now.Sub(e.start).Round(time.Millisecond))...)
	e.cancel(ErrHandlerTimeout)
}
