package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/tenureq/tenure/internal/logkey"
)

// This file is claiming ahead (QueueConfig.ClaimAhead): a queue whose handlers are short
// claims, while every slot is busy, the jobs its handlers are expected to free slots for
// during one claim's round trip, and starts each when a slot frees. Without it, a freed slot
// waits for the claim in flight and then for its own (a slot's cycle is the handler plus up
// to two round trips): with 8 slots of 1 ms jobs, one claim in flight and a durable commit
// per claim, each slot spent two thirds of its time waiting (issue 32, few-workers).
//
// Who owns what: the queue loop, like every other part of the queue's state. waiting holds
// the executions claimed ahead, oldest first: claimed (state running, lease from the claim,
// claim token and generation fenced like any other), in the loop's active set (heartbeated,
// counted by the owned cap), holding no handler slot, their handler not started, their
// timeout not started (begin starts both when a slot frees).
//
// Off by default: it lets a claim take more than the free slots, the contract's bound
// (docs/contract.md §1), so a dying worker strands the waiting jobs too until their leases end.
//
// How many: at most ClaimAhead, and only what the measured averages
// predict: each running handler frees its slot within a claim's round trip with probability
// about roundTrip/handlerTime, so ahead = round(running × min(1, rtt/run)). A queue of long
// handlers (run ≫ rtt) claims nothing ahead: a job never waits in memory for a slot that a
// worker with a free slot could have given it. Nor does a queue that has not measured both
// yet, a queue with Limits (a claimed job counts against the limit: one waiting would hold
// room it does not use), or a worker with a slot pool (the pool lends free slots between
// queues; a job waiting for a slot would hold one it cannot lend).
//
// Bounds: a job waits at most aheadMaxWait for a slot (when handlers that were short turn
// long); then every waiting job goes back to ready by a fenced release that does not charge
// the attempt, for any worker to claim, and the queue claims nothing ahead until its handlers'
// returns show them short again. At Stop, waiting jobs are released at once, as the jobs
// of a forming batch are. A waiting job whose context ends (an operator's cancel, a lost
// lease) is never started: it finishes as a handler returning its context's cause would.

// aheadMaxWait is how long a job claimed ahead may wait for a slot before it is given back.
const aheadMaxWait = time.Second

// aheadAlpha is the weight of a new sample in the loop's moving averages of handler time and
// claim round trip.
const aheadAlpha = 0.2

// ewma folds sample into avg (zero: no sample yet).
func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return max(sample, 1)
	}
	return max(time.Duration(float64(avg)*(1-aheadAlpha)+float64(sample)*aheadAlpha), 1)
}

// ahead is how many jobs the queue may hold claimed beyond its slots now (loop).
func (q *queue) ahead() int {
	if q.cfg.ClaimAhead <= 0 || q.limits != nil || q.w.slots != nil || q.runAvg == 0 || q.rttAvg == 0 || q.stopping {
		return 0
	}
	p := min(1, float64(q.rttAvg)/float64(q.runAvg))
	return min(q.cfg.ClaimAhead, int(math.Round(float64(q.running)*p)))
}

// startWaiting starts the jobs claimed ahead while slots are free, oldest first (loop; every
// turn, so a slot freed by any event — a handler's return, a stuck handler, a batch's end —
// is taken).
func (q *queue) startWaiting() {
	for len(q.waiting) > 0 && q.running < q.cfg.Concurrency && !q.stopping {
		e := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		if len(q.waiting) == 0 {
			q.waiting = nil
		}
		q.start(e)
	}
}

// endWaiting finishes e, a job claimed ahead whose context ended before it started (an
// operator cancelled it, or its lease was lost), without running it: cancelled, or given back
// without charging the attempt (a fenced write, refused as stale if the job is no longer
// ours) (loop).
func (q *queue) endWaiting(e *Execution, cause error) {
	if i := slices.Index(q.waiting, e); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
	e.waiting, e.returned = false, true
	e.fin = finish{to: toRelease, err: cause}
	if errors.Is(cause, ErrJobCancelled) {
		e.fin = finish{to: toCancelled, code: CodeCancelled, msg: "cancelled before its handler started", err: cause}
	}
	q.pending = append(q.pending, e)
}

// start gives e a slot and starts its handler (or adds it to its batch kind's forming batch)
// (loop). A job claimed ahead starts its attempt's clock here.
func (q *queue) start(e *Execution) {
	if e.waiting {
		if cause := context.Cause(e.ctx); cause != nil {
			q.endWaiting(e, cause)
			return
		}
	}
	q.running++
	if e.waiting {
		q.w.m.ClaimedAhead.Add(1)
		e.waiting = false
		e.begin(time.Now())
		q.hbNote(e) // its stuck deadline counts from now
	}
	if e.h != nil && e.h.batch != nil {
		q.collect(e) // a batch kind: its batch call starts it (batch.go)
		return
	}
	q.w.m.HandlersRunning.Add(1)
	q.dispatch(e)
}

// waitingDue returns when the oldest waiting job has waited aheadMaxWait (false: none waits).
func (q *queue) waitingDue() (time.Time, bool) {
	if len(q.waiting) == 0 {
		return time.Time{}, false
	}
	return q.waiting[0].start.Add(aheadMaxWait), true
}

// releaseWaiting gives back every job claimed ahead (Stop began, or the oldest waited
// aheadMaxWait): a fenced release that does not charge the attempt (loop).
func (q *queue) releaseWaiting() {
	for _, e := range q.waiting {
		e.waiting = false
		e.returned, e.released = true, true
		e.cancel(ErrWorkerStopping)
		e.fin = finish{to: toRelease}
		q.pending = append(q.pending, e)
	}
	if n := len(q.waiting); n > 0 {
		q.w.m.AheadReleased.Add(int64(n))
	}
	q.waiting = nil
}

// expireWaiting releases the waiting jobs once the oldest has waited aheadMaxWait (loop).
func (q *queue) expireWaiting(now time.Time) {
	if at, ok := q.waitingDue(); ok && !now.Before(at) {
		q.w.log.Warn("tenure: jobs claimed ahead found no free slot within "+aheadMaxWait.String()+"; giving them back",
			logkey.Queue, q.name, logkey.Jobs, len(q.waiting))
		q.releaseWaiting()
		// No slot freed in aheadMaxWait: the handlers running now are long, whatever the
		// average of those that returned says (a hung handler never returns to correct it).
		// Claim nothing ahead again until returns bring the average down, so that a queue
		// of hung handlers does not claim and give back a job every aheadMaxWait.
		q.runAvg = max(q.runAvg, aheadMaxWait)
	}
}
