package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/logkey"
)

// This file is the owner of a queue's state. One goroutine per queue, the queue loop, owns
// the handler slots, the set of the queue's active executions and every per-execution flag,
// the claimers' backoff, the watermarks, the fairness policy and the claim mode's state
// (claimmode.go), and it starts the handlers of what its claims returned. Everything else
// reports to it over channels and never touches that state:
//
//	claim goroutine   --claimResult-->   loop   (one per claim in flight, at most Claimers)
//	claim batcher stmt --claimResult-->  loop   (the batched claims: claimbatch.go; no claim goroutine)
//	handler goroutine --handlerResult--> loop   (one per running job; a batch call's: all its jobs in one, batch.go)
//	heartbeat stmt    --hbResult------>  loop   (at most one in flight)
//	finishers         --settled------->  loop   (shared by all queues)
//	listener          --wake/cancel/resync--> loop
//	queue state svc   --pauseCh-------> loop   (paused or not; pause.go)
//	loop              --*Execution-->    finishers (finishCh; never blocks the loop)
//	loop              --claimPlan.done--> claim goroutine (successes riding on the claim, back
//	                                      in its claimResult; claim.go)
//	loop              <--sync/leave-->   slot pool (Config.Slots; a mutex-guarded counter the
//	                                      loops call, never wait on; slotpool.go)
//	slot pool         --poolCh-------->  loop   (slots granted: the next sync reads them)
//
// Stop sends the loop a stopPlan; the loop stops claiming, lets handlers finish, cancels them
// at hardAt, releases what they still hold at releaseAt, and returns once it owns nothing (or
// at once when the engine context ends at Stop's deadline, reporting what it abandons).

type queue struct {
	w    *Engine
	name string
	cfg  QueueConfig
	pol  *Policy

	claimedCh  chan claimResult
	returnedCh chan handlerResult
	settledCh  chan []settled
	hbCh       chan hbResult
	cancelCh   chan int64
	wakeCh     chan struct{} // NOTIFY: new jobs in this queue (1-buffered)
	// dueHint: per band, the oldest due time (unix µs; 0 = none) that NOTIFYs announced since
	// the loop last planned a claim. The listener lowers it, the loop takes it (claim.go,
	// "Watermarks").
	dueHint [MaxPriority + 1]atomic.Int64
	// plainNotified: a NOTIFY without a due-time hint arrived since the last full claim (the
	// listener sets it, the loop clears it when it plans a full claim).
	plainNotified atomic.Bool
	skip          BandSkip      // the bands the batched claims found empty (claimbatch.go)
	resyncCh      chan struct{} // the listener reconnected: heartbeat every job now (1-buffered)
	stopCh        chan stopPlan // 1-buffered
	pauseCh       chan bool     // the queue state service: paused or not (1-buffered, latest wins)
	done          chan struct{} // closed when the loop returns
	// runCh hands an execution to an idle handler goroutine (unbuffered: a send succeeds only
	// when one waits; execute.go, dispatch); claimRunCh a claim to an idle claim goroutine
	// (claim.go, runClaim); batchRunCh a batch to an idle batch goroutine (batch.go).
	runCh      chan *Execution
	claimRunCh chan func()
	batchRunCh chan []*Execution

	// Owned by the loop goroutine.
	active  map[*Execution]struct{} // a job can appear twice: a stuck attempt and its successor
	running int                     // handler slots in use (handlers running and not declared stuck)
	// waiting: jobs claimed ahead, oldest first, waiting for a slot; runAvg and rttAvg: moving
	// averages of a handler's time and a claim's round trip, which decide how many (ahead.go).
	waiting        []*Execution
	runAvg, rttAvg time.Duration
	reserved       int // slots reserved by claims in flight
	claimers       []claimer
	inFlight       int // claims in flight
	pending        []*Execution
	// ride: successes waiting for the queue's next claim to complete them in its transaction,
	// since rideSince (claim.go, "Completions ride on claims").
	ride       []*Execution
	rideSince  time.Time
	hbInFlight bool
	hbAll      bool
	hbDue      time.Time // the next heartbeat pass is due then (zero: none); heartbeat.go
	hbLast     time.Time // the last heartbeat pass
	wakeSaved  bool      // a wake-up came while no claimer slept: the next sleep is skipped
	wm         bandTimes // see watermarks in claim.go
	wmSince    time.Time // the last full claim (watermarks reset)
	wmEvery    time.Duration
	wmForce    bool // the next claim is a full claim
	stopping   bool
	paused     bool        // an operator paused the queue: start no claim (pause.go)
	pausedFlag atomic.Bool // paused, for Stats and the registry (written by the loop)
	// mode is how the queue claims (claimmode.go); its state is the loop's like the rest.
	mode claimMode
	// forming: per batch kind, the claimed jobs collected for its next batch call (batch.go).
	forming map[string]*forming

	limits *limitArgs // nil: no limits (limits.go); fixed at New

	// The worker-wide slot pool (slotpool.go; nil w.slots: none). pm is the queue's account,
	// guarded by the pool's lock; poolHeld and poolWaiting are the loop's copy of what its
	// last sync returned; poolCh: the pool granted slots (1-buffered).
	pm          poolMember
	poolHeld    int
	poolWaiting bool
	poolCh      chan struct{}
}

// claimer is one claim slot's backoff state: a queue may have Claimers claims in flight.
type claimer struct {
	busy       bool
	sleepUntil time.Time     // zero: ready
	wakeable   bool          // a NOTIFY ends the sleep (not after an error)
	idle       time.Duration // current empty-claim backoff
}

// claimResult is what a claim goroutine reports to the loop: the plan it ran, the attempts
// it owns (none when err is set), what its mode learnt (claimmode.go) and how long it took.
type claimResult struct {
	idx  int // claimer
	n    int // slots reserved
	plan claimPlan
	got  []claimed
	fb   claimFeedback
	err  error
	took time.Duration
}

// handlerResult is a handler's result (e, fin), or a batch call's: one finish per job (es,
// fins; e is nil).
type handlerResult struct {
	e    *Execution
	fin  finish
	es   []*Execution
	fins []finish
}

type settled struct {
	e      *Execution
	landed bool
	err    error // non-nil: abandoned (not written); landed is false
}

type hbResult struct {
	due  []*Execution
	at   time.Time
	rows []*gen.HeartbeatRow
	err  error
}

// stopPlan tells a queue loop when to cancel handlers and when to release what they hold.
// Zero times mean "never": the loop waits for handlers until the engine context ends.
type stopPlan struct {
	hardAt, releaseAt time.Time
	deadline          time.Time // the stop's deadline, for the logs
}

// merge returns the plan whose times are the earlier of p's and o's (zero counts as never).
func (p stopPlan) merge(o stopPlan) stopPlan {
	earlier := func(a, b time.Time) time.Time {
		if a.IsZero() || (!b.IsZero() && b.Before(a)) {
			return b
		}
		return a
	}
	return stopPlan{hardAt: earlier(p.hardAt, o.hardAt), releaseAt: earlier(p.releaseAt, o.releaseAt), deadline: earlier(p.deadline, o.deadline)}
}

func newQueue(w *Engine, name string, cfg QueueConfig) *queue {
	q := &queue{w: w, name: name, cfg: cfg, pol: NewPolicy(cfg.Fairness),
		claimedCh: make(chan claimResult, cfg.Claimers), returnedCh: make(chan handlerResult, cfg.Concurrency), settledCh: make(chan []settled),
		hbCh: make(chan hbResult), cancelCh: make(chan int64, 16), wakeCh: make(chan struct{}, 1),
		resyncCh: make(chan struct{}, 1), poolCh: make(chan struct{}, 1), stopCh: make(chan stopPlan, 1), pauseCh: make(chan bool, 1), done: make(chan struct{}), runCh: make(chan *Execution),
		claimRunCh: make(chan func()), batchRunCh: make(chan []*Execution),
		active: map[*Execution]struct{}{}, claimers: make([]claimer, cfg.Claimers),
		limits: newLimitArgs(cfg.Limits)}
	if q.limits != nil {
		q.limits.permits = usesPermits(q.limits, q.pol)
	}
	q.mode = newClaimMode(q)
	return q
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (q *queue) wake() { signal(q.wakeCh) }

// heartbeatTick is the shortest interval between two heartbeat passes of a loop (the pass
// runs when a heartbeat or a stuck deadline falls due: heartbeat.go, hbNext).
const heartbeatTick = 50 * time.Millisecond

// loop is the queue's owner goroutine. ctx is the engine context: it ends at Stop's deadline.
func (q *queue) loop(ctx context.Context) {
	defer close(q.done)
	w := q.w
	if w.slots != nil {
		defer w.slots.leave(q) // whatever it still holds goes back to the pool
	}
	hbTimer := time.NewTimer(time.Hour)
	hbTimer.Stop()
	defer hbTimer.Stop()
	var hbArmed time.Time // when hbTimer fires (zero: stopped)
	claimTimer := time.NewTimer(time.Hour)
	defer claimTimer.Stop()
	rideTimer := time.NewTimer(time.Hour)
	rideTimer.Stop()
	defer rideTimer.Stop()
	var rideArmed time.Time // when rideTimer fires (zero: stopped)
	batchTimer := time.NewTimer(time.Hour)
	batchTimer.Stop()
	defer batchTimer.Stop()
	var hardC, releaseC <-chan time.Time
	var plan stopPlan
	hardDone, releaseDone := false, false
	waitTimer := time.NewTimer(time.Hour)
	waitTimer.Stop()
	defer waitTimer.Stop()
	var waitArmed time.Time // when waitTimer fires (zero: stopped)
	for {
		q.startWaiting() // slots freed since the last turn take the jobs claimed ahead (ahead.go)
		if at, ok := q.waitingDue(); ok && !at.Equal(waitArmed) {
			waitTimer.Reset(max(time.Until(at), 0))
			waitArmed = at
		}
		q.poolSync()
		if !q.stopping {
			if !q.paused {
				q.claimMore(ctx)
			}
		} else if len(q.active) == 0 && q.inFlight == 0 {
			return
		}
		if at, ok := q.startBatches(time.Now()); ok { // batch.go
			batchTimer.Reset(max(time.Until(at), 0))
		}
		if d, ok := q.nextClaimWake(); ok && q.mayClaim() {
			// Only when a woken claimer could claim: otherwise (stopping, paused, no free
			// slot, a permit claim in flight) a claimer whose sleep has passed re-armed the
			// timer at 0 on every turn and spun the loop until a slot freed (with many queues,
			// the spinning loops starved the finishers' settles past Stop's deadline:
			// TestClaimBatchManyQueuesDrainExactlyOnce under -race). The event that makes a
			// claim possible again (a handler result, a resume) runs the loop anyway.
			claimTimer.Reset(d)
		}
		if at, ok := q.hbNext(); ok && !at.Equal(hbArmed) {
			hbTimer.Reset(max(time.Until(at), 0))
			hbArmed = at
		}
		if len(q.ride) > 0 {
			if due := q.rideSince.Add(w.cfg.FinishLinger); q.inFlight == 0 || q.stopping || q.paused || !time.Now().Before(due) {
				q.unride(!time.Now().Before(due))
			} else if !due.Equal(rideArmed) {
				// Claims are in flight: the next one started when one returns takes them, unless
				// FinishLinger passes first.
				rideTimer.Reset(time.Until(due))
				rideArmed = due
			}
		}
		q.handOver()
		var out chan *Execution
		var next *Execution
		if len(q.pending) > 0 {
			out, next = w.finishCh, q.pending[0]
		}
		select {
		case <-ctx.Done():
			q.abandonAll()
			return
		case p := <-q.stopCh:
			// The first plan, or a later Stop's: keep the earlier of each time.
			if q.stopping {
				p = plan.merge(p)
			}
			q.stopping, plan = true, p
			q.releaseForming() // batch.go
			q.releaseWaiting() // ahead.go
			if !hardDone {
				hardC = after(plan.hardAt)
			}
			if !releaseDone {
				releaseC = after(plan.releaseAt)
			}
		case <-hardC:
			hardC, hardDone = nil, true
			q.cancelHandlers(plan.deadline)
		case <-releaseC:
			releaseC, releaseDone = nil, true
			q.releaseHeld()
		case r := <-q.claimedCh:
			q.claimed(r)
		case r := <-q.returnedCh:
			q.returned(r)
		case ss := <-q.settledCh:
			q.settleAll(ss)
		case r := <-q.hbCh:
			q.heartbeatDone(r)
		case id := <-q.cancelCh:
			for e := range q.active {
				if e.c.ID == id {
					q.requestCancel(e)
				}
			}
		case <-q.resyncCh:
			// Notifications may have been lost while the listener was away: heartbeat every
			// job now, and scan every band from its start.
			q.hbAll, q.wmForce = true, true
		case p := <-q.pauseCh:
			q.pauseChanged(p)
		case <-q.wakeCh:
			q.wakeOne()
		case <-q.poolCh: // the pool granted slots: poolSync reads them
		case <-claimTimer.C:
		case <-rideTimer.C:
			rideArmed = time.Time{}
		case <-batchTimer.C:
		case now := <-waitTimer.C:
			waitArmed = time.Time{}
			q.expireWaiting(now)
		case now := <-hbTimer.C:
			hbArmed = time.Time{}
			q.heartbeat(ctx, now)
		case out <- next:
			q.pending = q.pending[1:]
		}
		q.drain()
	}
}

// drain takes the results already waiting (handlers, finishers, claims) before the loop
// decides again, so that one decision — a claim, a hand-over to the finishers — covers a
// burst of events instead of one event each.
func (q *queue) drain() {
	for range 256 {
		select {
		case r := <-q.returnedCh:
			q.returned(r)
		case ss := <-q.settledCh:
			q.settleAll(ss)
		case r := <-q.claimedCh:
			q.claimed(r)
		default:
			return
		}
	}
}

// after returns a channel that fires at t, or nil (never) for a zero t.
func after(t time.Time) <-chan time.Time {
	if t.IsZero() {
		return nil
	}
	return time.After(time.Until(t))
}

// free is the number of jobs a new claim may take: free handler slots, bounded by the owned
// cap (jobs whose handler returned but whose finish has not landed still belong to this worker:
// with a slow database they push back on claiming instead of piling up leases), the batch and,
// with a worker-wide slot pool, the slots the queue holds.
func (q *queue) free() int {
	n := q.ownFree()
	if q.w.slots != nil {
		n = min(n, q.poolHeld-q.running-q.reserved)
	}
	return n
}

// ownFree is free without the slot pool: what the queue's own Concurrency leaves, plus what
// it may claim ahead (ahead.go).
func (q *queue) ownFree() int {
	c := q.cfg.Concurrency
	return min(c+q.ahead()-q.running-len(q.waiting)-q.reserved, 4*c-len(q.active)-q.reserved, q.w.cfg.MaxClaimBatch)
}

// poolSync settles the queue's account with the worker-wide slot pool (loop, every turn;
// slotpool.go): it holds what it uses, plus what a claim could take now if a claimer is ready
// and the pool has it for this queue; it gives back the rest.
func (q *queue) poolSync() {
	p := q.w.slots
	if p == nil {
		return
	}
	want := 0
	if !q.stopping && !q.paused && q.claimerReady() {
		want = max(q.ownFree(), 0)
	}
	q.poolHeld, q.poolWaiting = p.sync(q, q.running+q.reserved, want, q.poolHeld)
}

// claimerReady reports whether claimMore could start a claim now if it had free slots.
func (q *queue) claimerReady() bool {
	if q.inFlight > 0 && q.limits != nil && q.limits.permits {
		return false
	}
	now := time.Now()
	for i := range q.claimers {
		c := &q.claimers[i]
		if !c.busy && (c.sleepUntil.IsZero() || !now.Before(c.sleepUntil)) {
			return true
		}
	}
	return false
}

// claimMore starts claims for ready claimers while slots are free.
func (q *queue) claimMore(ctx context.Context) {
	now := time.Now()
	for i := range q.claimers {
		c := &q.claimers[i]
		if c.busy || (!c.sleepUntil.IsZero() && now.Before(c.sleepUntil)) {
			continue
		}
		n := q.free()
		if n <= 0 {
			return
		}
		if q.inFlight > 0 && q.limits != nil && q.limits.permits {
			// Permit claims of this worker take turns on its permit rows, each holding them
			// through its commit: a second claim would only wait for the first. One at a time,
			// each takes every free slot and every completion waiting (permits.go).
			return
		}
		c.busy, c.sleepUntil = true, time.Time{}
		q.reserved += n
		q.inFlight++
		q.startClaim(ctx, i, n)
	}
}

// mayClaim reports whether claimMore could start a claim now, given a ready claimer. With a
// slot pool, a queue waiting in the pool's line is not (the grant wakes its loop: poolCh),
// and one that is not waiting may be, once a claimer is ready (poolSync then asks the pool).
func (q *queue) mayClaim() bool {
	free := q.free() > 0
	if q.w.slots != nil && !q.poolWaiting {
		free = q.ownFree() > 0
	}
	return !q.stopping && !q.paused && free && !(q.inFlight > 0 && q.limits != nil && q.limits.permits)
}

// nextClaimWake returns how long until the first sleeping claimer wakes.
func (q *queue) nextClaimWake() (time.Duration, bool) {
	var first time.Time
	for i := range q.claimers {
		c := &q.claimers[i]
		if !c.busy && !c.sleepUntil.IsZero() && (first.IsZero() || c.sleepUntil.Before(first)) {
			first = c.sleepUntil
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(time.Until(first), 0), true
}

// wakeOne ends the sleep of one wakeable claimer (a NOTIFY, or a sibling's full claim). When
// none sleeps (every claim is in flight, and may have read the queue before the new jobs
// committed), the wake-up is kept for the next claimer that would go to sleep.
func (q *queue) wakeOne() {
	for i := range q.claimers {
		c := &q.claimers[i]
		if !c.busy && !c.sleepUntil.IsZero() && c.wakeable {
			c.sleepUntil = time.Time{}
			return
		}
	}
	q.wakeSaved = true
}

// sleep puts claimer c to sleep for d with ±50% jitter; a saved wake-up cancels a wakeable
// sleep.
func (q *queue) sleep(c *claimer, d time.Duration, wakeable bool) {
	if wakeable && q.wakeSaved {
		q.wakeSaved = false
		c.sleepUntil = time.Time{}
		return
	}
	d = d/2 + time.Duration(rand.Int64N(int64(d)+1))
	c.sleepUntil, c.wakeable = time.Now().Add(d), wakeable
}

// takeRide returns the completions waiting for a claim (up to MaxFinishBatch, oldest first) for
// the claim being planned (loop).
func (q *queue) takeRide() []*Execution {
	if len(q.ride) == 0 {
		return nil
	}
	n := min(len(q.ride), q.w.cfg.MaxFinishBatch)
	done := q.ride[:n:n]
	if n == len(q.ride) {
		q.ride = nil
	} else {
		q.ride = append([]*Execution(nil), q.ride[n:]...)
		q.rideSince = time.Now() // an approximation for the rest: they rode on no claim yet
	}
	return done
}

// unride hands the completions no claim took to the finishers (loop); lingered: they waited
// FinishLinger already, so the finishers write them without lingering again.
func (q *queue) unride(lingered bool) {
	for _, e := range q.ride {
		e.lingered = lingered
	}
	q.pending, q.ride = append(q.pending, q.ride...), nil
}

// handOver gives the finishers every pending finish the channel's buffer takes, so that a
// finisher's next batch holds everything that accumulated during its previous write.
func (q *queue) handOver() {
	for len(q.pending) > 0 {
		select {
		case q.w.finishCh <- q.pending[0]:
			q.pending = q.pending[1:]
		default:
			return
		}
	}
}

// backoff doubles the idle wait from FetchPollMin to FetchPollMax.
func (q *queue) backoff(cur time.Duration) time.Duration {
	if cur == 0 {
		return q.w.cfg.FetchPollMin
	}
	return min(cur*2, q.w.cfg.FetchPollMax)
}

// claimed takes a claim's result: dispatch the jobs (or, once stopping, give them straight
// back), and decide the claimer's next wait.
func (q *queue) claimed(r claimResult) {
	w := q.w
	c := &q.claimers[r.idx]
	c.busy = false
	q.inFlight--
	q.reserved -= r.n
	q.mode.learn(q, &r)
	if r.err == nil {
		q.rttAvg = ewma(q.rttAvg, r.took) // ahead.go
		q.recordClaim(r)
		if q.limits != nil && !r.plan.exclusive {
			w.m.StripedClaims.Add(1)
		}
	}
	if len(r.plan.done) > 0 {
		// The completions the claim carried (claim.go, "Completions ride on claims").
		if r.err != nil {
			// Rolled back with the claim, or committed with a lost reply: the finishers write
			// them, reading back what they find already written.
			for _, e := range r.plan.done {
				e.rideFailed, e.lingered = true, true
			}
			q.pending = append(q.pending, r.plan.done...)
		} else {
			ss := make([]settled, 0, len(r.plan.done))
			var entries []DoneID
			for _, e := range r.plan.done {
				rr, seen := r.fb.doneLanded[e.c.ID]
				if seen && !rr.landed {
					q.pending = append(q.pending, e) // busy: the finishers wait for its row
					continue
				}
				if rr.landed {
					w.m.FinishedOnClaims.Add(1)
					entries = append(entries, DoneID{ID: e.c.ID, Deleted: rr.deleted, Settles: rr.settles})
				}
				ss = append(ss, settled{e: e, landed: rr.landed})
			}
			w.done.Add(entries) // the claim committed: the done signal (engine/donenotify.go)
			q.settleAll(ss)
		}
	}
	// The loop starts the handlers: a handler's result can only reach the loop after the loop
	// registered its execution.
	for i := range r.got {
		// A job for which no slot is free was claimed ahead: it waits for one (ahead.go).
		wait := !q.stopping && (q.running >= q.cfg.Concurrency || len(q.waiting) > 0)
		e := q.newExecution(&r.got[i], wait)
		// Near a limit (an exclusive or permit claim), a finish gives room back: finish it
		// without lingering and wake a claimer when it lands (limits.go).
		e.limited = e.limited && r.plan.exclusive
		q.active[e] = struct{}{}
		q.hbNote(e) // its heartbeat pass (heartbeat.go)
		w.m.Owned.Add(1)
		if q.stopping {
			// Claimed while Stop began: the claim committed, so the jobs are ours; give them
			// back at once instead of starting handlers the stop would only interrupt.
			e.returned, e.released = true, true
			e.cancel(ErrWorkerStopping)
			e.fin = finish{to: toRelease}
			q.pending = append(q.pending, e)
			continue
		}
		if wait {
			q.waiting = append(q.waiting, e)
			continue
		}
		q.start(e)
	}
	switch {
	case r.err != nil:
		if q.stopping {
			return
		}
		w.m.ClaimErrors.Add(1)
		w.engineError(&w.claimLog, "claim", r.err, logkey.Queue, q.name)
		c.idle = q.backoff(c.idle)
		q.sleep(c, c.idle, false)
	case r.fb.binding && len(r.got) < r.n:
		// A limit held jobs back (limits.go). Room comes back when a limited job finishes:
		// ours wake a claimer as they settle (settle), so the claimers back off as after an
		// empty claim instead of polling — every limited claim of the queue, cluster-wide,
		// takes the same lock, so polling claims would queue behind each other and delay the
		// claims that find room. Another worker's finishes are seen by the polls.
		if len(r.got) == 0 {
			w.m.EmptyClaims.Add(1)
		}
		w.m.LimitedClaims.Add(1)
		c.idle = q.backoff(c.idle)
		if q.limits.pollCap > 0 {
			c.idle = min(c.idle, max(q.limits.pollCap, w.cfg.FetchPollMin))
		}
		q.sleep(c, c.idle, true)
	case len(r.got) == 0:
		w.m.EmptyClaims.Add(1)
		if q.behindSuspected(r.plan) {
			// A NOTIFY announced a due job that this watermark claim did not find: it may
			// sit behind the watermark. Claim again at once, from the start of every band.
			q.wmForce, c.idle, c.sleepUntil = true, 0, time.Time{}
			return
		}
		c.idle = q.backoff(c.idle)
		q.sleep(c, c.idle, true)
	case len(r.got) == r.n:
		c.idle = 0
		q.wakeOne() // there may be more: let an idle sibling claim too
	default:
		// Short claim: nothing more is claimable right now. Wait for a NOTIFY or the first
		// poll rather than asking again at once.
		c.idle = w.cfg.FetchPollMin
		q.sleep(c, c.idle, true)
	}
}

// returned takes a handler's result, or a batch call's (one per job).
func (q *queue) returned(r handlerResult) {
	if r.e != nil {
		if !r.e.stuck {
			q.runAvg = ewma(q.runAvg, time.Since(r.e.start)) // ahead.go
		}
		q.handlerReturned(r)
		return
	}
	for i, e := range r.es {
		q.handlerReturned(handlerResult{e: e, fin: r.fins[i]})
	}
}

// handlerReturned takes a handler's result and queues its finish.
func (q *queue) handlerReturned(r handlerResult) {
	e := r.e
	if e.released {
		// Stop released the job before the handler returned; fencing would reject it anyway.
		q.w.log.Warn("tenure: handler returned after its job was released by Stop; result discarded", e.c.logAttrs()...)
		return
	}
	e.returned = true
	f := r.fin
	if e.stuck {
		// The engine gave up on this attempt at timeout+grace (its slot was freed then);
		// whatever the handler says now is fenced out as a timeout.
		q.w.m.LateFinishes.Add(1)
		f = q.w.failure(e, CodeTimeout, 0, fmt.Errorf("handler returned %v after it was declared stuck (result discarded)", time.Since(e.start).Round(time.Millisecond)))
	} else {
		q.running--
	}
	e.fin = f
	if f.to == toSucceeded && !e.txCompleted.Load() && !q.stopping && !q.w.noRide {
		// The queue's next claim completes it in its own transaction (claim.go, "Completions
		// ride on claims"); the loop hands it to the finishers if no claim takes it in time.
		if len(q.ride) == 0 {
			q.rideSince = time.Now()
		}
		q.ride = append(q.ride, e)
		if e.limited {
			// Its finish frees room under a limit: a sleeping claimer claims now and uses it
			// in the same transaction (permits.go).
			q.wakeOne()
		}
		return
	}
	q.pending = append(q.pending, e)
}

// settleAll records a finisher's batch of results for this queue.
func (q *queue) settleAll(ss []settled) {
	for _, s := range ss {
		q.settle(s)
	}
}

// settle records a finish the finishers wrote (landed), saw rejected (stale) or abandoned.
func (q *queue) settle(s settled) {
	e := s.e
	if _, ok := q.active[e]; !ok {
		return
	}
	delete(q.active, e)
	w := q.w
	if e.limited {
		q.wakeOne() // its group has room again (limits.go)
	}
	w.m.Owned.Add(-1)
	outcome := ""
	switch {
	case s.err != nil:
		outcome = OutcomeAbandoned
		w.m.FinishAbandoned.Add(1)
		w.log.Error("tenure: finish abandoned; the job's lease will expire and the sweep retries it",
			e.c.logAttrs(logkey.Transition, e.fin.to.String(), logkey.Err, s.err)...)
		w.report(e, s.err)
	case !s.landed:
		outcome = OutcomeStale
		w.m.StaleRejected.Add(1)
		w.log.Warn("tenure: stale finish rejected: the job is no longer ours",
			e.c.logAttrs(logkey.Transition, e.fin.to.String())...)
		w.report(e, NewStaleWriteError(e.c.ID, e.c.Generation, e.fin.to.String()))
	default:
		switch e.fin.to {
		case toSucceeded:
			outcome = OutcomeSucceeded
			w.m.Succeeded.Add(1)
			w.m.LastSuccess.Store(time.Now().UnixNano())
		case toRetry: // expected now and then: the job runs again
			outcome = OutcomeRetried
			w.m.Retried.Add(1)
			w.log.Warn("tenure: job attempt failed; retrying", e.c.logAttrs(logkey.Code, e.fin.code, logkey.Next, e.fin.to.String(),
				logkey.Delay, e.fin.delay, logkey.Err, e.fin.msg)...)
		case toDead: // needs an operator
			outcome = OutcomeDead
			w.m.Dead.Add(1)
			w.log.Error("tenure: job attempt failed; job is dead", e.c.logAttrs(logkey.Code, e.fin.code, logkey.Next, e.fin.to.String(),
				logkey.Err, e.fin.msg)...)
		case toCancelled:
			outcome = OutcomeCancelled
			w.m.Cancelled.Add(1)
		case toRelease:
			outcome = OutcomeReleased
			w.m.Released.Add(1)
		case toSnooze:
			outcome = OutcomeSnoozed
			w.m.Snoozed.Add(1)
		}
		w.report(e, nil)
	}
	if outcome != "" {
		w.m.recordOutcome(e.c.Queue, e.c.Kind, outcome, e.c.Attempt)
	}
}

// requestCancel cancels the handler of a job an operator asked to cancel.
func (q *queue) requestCancel(e *Execution) {
	if e.returned || e.released {
		return
	}
	if context.Cause(e.ctx) == nil {
		q.w.m.CancelSignals.Add(1)
		q.w.log.Info("tenure: cancel requested, cancelling handler", e.c.logAttrs()...)
	}
	e.cancel(ErrJobCancelled)
	if e.waiting {
		q.endWaiting(e, ErrJobCancelled) // claimed ahead, never started (ahead.go)
	}
}

// cancelHandlers is the hard stop: every running handler's context ends (ErrWorkerStopping);
// a handler that returns then has its job released without charging the attempt.
func (q *queue) cancelHandlers(deadline time.Time) {
	n := 0
	for e := range q.active {
		if !e.returned && !e.released {
			e.cancel(ErrWorkerStopping)
			n++
		}
	}
	if n > 0 {
		in := "none"
		if !deadline.IsZero() {
			in = max(time.Until(deadline), 0).Round(time.Millisecond).String()
		}
		q.w.log.Warn(fmt.Sprintf("tenure: stop deadline in %s: cancelling handlers that have not returned (their jobs are released, attempts not charged)", in),
			logkey.Queue, q.name, "handlers", n)
	}
}

// releaseHeld gives back, with a fenced release, every job whose handler still has not
// returned (it ignores its context). Its late result is dropped, and fencing would reject it.
func (q *queue) releaseHeld() {
	n := 0
	for e := range q.active {
		if e.returned || e.released {
			continue
		}
		e.released, e.returned = true, true
		e.cancel(ErrWorkerStopping)
		if !e.stuck {
			q.running--
		}
		e.fin = finish{to: toRelease}
		q.pending = append(q.pending, e)
		n++
	}
	if n > 0 {
		q.w.m.StillRunning.Add(int64(n))
		q.w.log.Warn("tenure: stop: releasing jobs of handlers that ignore cancellation", logkey.Queue, q.name, logkey.Jobs, n)
	}
}

// abandonAll is the end of Stop's budget: whatever the loop still owns is left to its lease.
func (q *queue) abandonAll() {
	if len(q.active) == 0 {
		return
	}
	w := q.w
	for e := range q.active {
		e.cancel(ErrWorkerStopping)
		w.m.Owned.Add(-1)
		w.m.FinishAbandoned.Add(1)
		w.m.recordOutcome(e.c.Queue, e.c.Kind, OutcomeAbandoned, e.c.Attempt)
		w.report(e, fmt.Errorf("%w: stop deadline reached before its finish was written", ErrFinishAbandoned))
	}
	w.log.Error("tenure: stop deadline reached; jobs left to their leases (the sweep will retry them)",
		logkey.Queue, q.name, logkey.Jobs, len(q.active))
	clear(q.active)
}
