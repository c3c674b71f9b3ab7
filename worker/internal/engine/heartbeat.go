package engine

import (
	"context"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/logkey"
)

// This file is the heartbeat, run by each queue loop for its own jobs. When a heartbeat falls
// due (at most every heartbeatTick; see hbNext) the loop batches the jobs whose heartbeat is due (each every lease/HeartbeatDivisor) into one
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

// When the loop runs heartbeat. Not on a fixed tick: hbDue is the earliest instant an active
// job's heartbeat falls due or its handler's timeout+grace passes (zero: nothing waits), kept
// as executions arrive (hbNote) and recomputed by each pass; the loop's timer fires then, but
// never sooner than heartbeatTick after the previous pass (hbNext), so heartbeats falling due
// close together still share one statement, and a pass that could not send (one in flight) or
// a resync (hbAll) runs again heartbeatTick later. A fixed 50 ms ticker woke every queue loop 20
// times a second whatever its jobs' leases: with 1,000 queues, 20,000 loop turns a second, the
// largest Go cost of a many-queue worker (bench/cmd/scaling, the queues sweep).

// hbNote records that execution e needs a heartbeat pass at its next heartbeat, or at its
// handler's stuck deadline if sooner (loop only).
func (q *queue) hbNote(e *Execution) {
	at := e.nextHB
	if !e.returned && !e.waiting && e.h != nil {
		if s := e.start.Add(e.h.opts.Timeout + q.w.cfg.StuckGrace); s.Before(at) {
			at = s
		}
	}
	q.hbAt(at)
}

// hbAt lowers hbDue to t (loop only).
func (q *queue) hbAt(t time.Time) {
	if q.hbDue.IsZero() || t.Before(q.hbDue) {
		q.hbDue = t
	}
}

// hbNext returns when the loop must run the next heartbeat pass; false: nothing waits for one.
func (q *queue) hbNext() (time.Time, bool) {
	if !q.hbAll && q.hbDue.IsZero() {
		return time.Time{}, false
	}
	at := q.hbDue
	if q.hbAll || at.IsZero() {
		at = q.hbLast
	}
	if floor := q.hbLast.Add(heartbeatTick); at.Before(floor) {
		at = floor
	}
	return at, true
}

// heartbeat runs on the loop: it declares stuck handlers and starts the due heartbeats.
func (q *queue) heartbeat(ctx context.Context, now time.Time) {
	w := q.w
	all := q.hbAll
	q.hbLast, q.hbDue = now, time.Time{}
	var due []*Execution
	for e := range q.active {
		if e.released || e.leaseLost || e.stuck {
			continue
		}
		if !e.returned && !e.waiting && e.h != nil {
			stuckAt := e.start.Add(e.h.opts.Timeout + w.cfg.StuckGrace)
			if now.After(stuckAt) {
				q.declareStuck(e, now)
				continue
			}
			q.hbAt(stuckAt)
		}
		// A job completed inside its handler's transaction needs no more lease, and that
		// transaction holds the row lock until it ends: heartbeating it would only wait.
		if e.txCompleted.Load() || e.finishFails.Load() >= maxHeartbeatedFinishFails {
			continue
		}
		if all || !now.Before(e.nextHB) || e.prog.due(now) {
			due = append(due, e)
		} else {
			q.hbAt(e.nextHB)
		}
	}
	if len(due) == 0 {
		// Nothing to heartbeat: a resync of no job is done (a job claimed from now on was
		// claimed with the listener up, and misses no signal).
		q.hbAll = false
		return
	}
	if q.hbInFlight {
		q.hbAt(now) // again after heartbeatTick (hbNext); hbAll stays set
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
		var rows []*gen.HeartbeatRow
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
	defer func() {
		// The jobs of this statement need the next pass at their (new) next heartbeat.
		for _, e := range r.due {
			if _, ok := q.active[e]; ok && !e.leaseLost {
				q.hbNote(e)
			}
		}
	}()
	w.m.Heartbeats.Add(1)
	for _, e := range r.due {
		e.prog.settled(r.err != nil)
	}
	if r.err != nil {
		if w.engCtx.Err() != nil {
			return
		}
		w.m.HeartbeatErrors.Add(1)
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
	w.m.HeartbeatRows.Add(n)
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

func (q *queue) loseLease(e *Execution, why string) {
	if e.leaseLost {
		return
	}
	e.leaseLost = true
	q.w.m.LeasesLost.Add(1)
	q.w.log.Warn("tenure: lease lost, cancelling handler", e.c.logAttrs("why", why)...)
	e.leaseUntil.Store(0)
	e.cancel(ErrLeaseLost)
	if e.waiting {
		q.endWaiting(e, ErrLeaseLost) // claimed ahead, never started (ahead.go)
	}
}

// declareStuck gives a hung handler's slot back and stops heartbeating its job.
func (q *queue) declareStuck(e *Execution, now time.Time) {
	e.stuck = true
	q.running--
	q.w.m.Stuck.Add(1)
	q.w.log.Error("tenure: handler stuck past timeout+grace; no more heartbeats, its job will be reclaimed when the lease expires",
		e.c.logAttrs("running_for", now.Sub(e.start).Round(time.Millisecond))...)
	e.cancel(ErrHandlerTimeout)
}
