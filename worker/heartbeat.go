package worker

import (
	"context"
	"time"

	"github.com/tenureq/tenure/db/gen"
)

// heartbeatLoop extends the leases of running jobs: every tick it batches the jobs whose
// heartbeat is due (each every lease/HeartbeatDivisor) into one fenced statement. A job the
// statement does not return has lost its lease: its handler's context is cancelled with cause
// ErrLeaseLost. Two failed statements in a row do the same, since the engine can no longer
// vouch for the lease. The loop also declares handlers stuck once they run past their
// timeout plus StuckGrace: their jobs are no longer heartbeated, so the lease expires and the
// job is reclaimed; a heartbeat never keeps a hung handler's job running.
func (w *Worker) heartbeatLoop() {
	defer w.bgWG.Done()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.bg.Done():
			return
		case <-t.C:
		}
		w.heartbeatTick(time.Now())
	}
}

func (w *Worker) heartbeatTick(now time.Time) {
	all := w.heartbeatAll.Swap(false)
	var due []*execution
	w.activeMu.Lock()
	for _, e := range w.active {
		// A job completed inside its handler's transaction needs no more lease, and that
		// transaction holds the row lock until it ends: heartbeating it would only wait.
		if e.stuck.Load() || e.released.Load() || e.leaseLost.Load() || e.txCompleted.Load() {
			continue
		}
		if !e.handlerDone.Load() && e.h != nil && now.After(e.start.Add(e.h.opts.Timeout+w.cfg.StuckGrace)) {
			w.declareStuck(e, now)
			continue
		}
		if all || !now.Before(e.nextHB) {
			due = append(due, e)
		}
	}
	w.activeMu.Unlock()
	if len(due) == 0 {
		return
	}
	sortByID(due)
	ids, tokens := idsTokens(due)
	ctx, cancel := context.WithTimeout(w.bg, 5*time.Second)
	rows, err := w.q.Heartbeat(ctx, gen.HeartbeatParams{Ids: ids, Tokens: tokens})
	cancel()
	w.m.heartbeats.Add(1)
	if err != nil {
		if w.bg.Err() != nil {
			return
		}
		w.m.heartbeatErrors.Add(1)
		w.log.Warn("tenure: heartbeat failed", "jobs", len(due), "err", err)
		for _, e := range due {
			e.hbFails++
			if e.hbFails >= 2 {
				w.loseLease(e, "two consecutive heartbeats failed")
				continue
			}
			// retry soon, well before the lease ends
			e.nextHB = now.Add(e.c.lease / time.Duration(2*w.cfg.HeartbeatDivisor))
		}
		return
	}
	extended := make(map[int64]bool, len(rows))
	for _, r := range rows {
		extended[r.ID] = true
		if r.CancelRequested {
			w.requestCancel(r.ID)
		}
	}
	w.m.heartbeatRows.Add(int64(len(rows)))
	for _, e := range due {
		if !extended[e.c.id] {
			if e.handlerDone.Load() {
				// The handler returned and its finish raced this heartbeat (the finish
				// committed first): the finish path settles the job, stale or not.
				continue
			}
			w.loseLease(e, "heartbeat changed 0 rows")
			continue
		}
		e.hbFails = 0
		e.leaseUntil.Store(now.Add(e.c.lease).UnixNano())
		e.nextHB = now.Add(e.c.lease / time.Duration(w.cfg.HeartbeatDivisor))
	}
}

func (w *Worker) loseLease(e *execution, why string) {
	if !e.leaseLost.CompareAndSwap(false, true) {
		return
	}
	w.m.leasesLost.Add(1)
	w.log.Warn("tenure: lease lost, cancelling handler", "job_id", e.c.id, "generation", e.c.generation, "why", why)
	e.leaseUntil.Store(0)
	e.stop(ErrLeaseLost)
}

// declareStuck is called with activeMu held.
func (w *Worker) declareStuck(e *execution, now time.Time) {
	if !e.stuck.CompareAndSwap(false, true) {
		return
	}
	w.m.stuck.Add(1)
	w.log.Error("tenure: handler stuck past timeout+grace; no more heartbeats, its job will be reclaimed when the lease expires",
		"job_id", e.c.id, "kind", e.c.kind, "running_for", now.Sub(e.start).Round(time.Millisecond))
	e.stop(ErrHandlerTimeout)
	if e.slotFreed.CompareAndSwap(false, true) {
		e.q.releaseSlot()
	}
}

// requestCancel cancels the handler of a job an operator asked to cancel.
func (w *Worker) requestCancel(id int64) {
	w.activeMu.Lock()
	e := w.active[id]
	w.activeMu.Unlock()
	if e == nil || e.handlerDone.Load() {
		return
	}
	if context.Cause(e.ctx) == nil {
		w.m.cancelSignals.Add(1)
		w.log.Info("tenure: cancel requested, cancelling handler", "job_id", id)
	}
	e.stop(ErrJobCancelled)
}
