package worker

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/tenureq/tenure/db/gen"
)

// This file is the claim path: one loop per queue that claims as many jobs as it has free
// handler slots (bounded by MaxClaimBatch), with the single-statement claim of SPEC section 1,
// committed (autocommit) before any handler starts.
//
// The loop is demand-driven: while the queue yields work it claims again as soon as a slot
// frees, so throughput is bounded by the handlers, not by a timer. A claim that returns no row
// backs off with jitter (FetchPollMin doubling to FetchPollMax); a NOTIFY from an insert wakes
// it at once. Polling stays the authority, so a lost notification only costs latency.

// claimed is one claimed attempt, as the claim statement returned it.
type claimed struct {
	id                       int64
	queue, kind              string
	payload                  []byte
	version                  int
	priority                 int
	runAt, createdAt         time.Time
	attemptedAt, lockedUntil time.Time
	attempt, maxAttempts     int
	lease                    time.Duration
	token                    uuid.UUID
	generation               int64
}

type queueRunner struct {
	w    *Worker
	name string
	cfg  QueueConfig
	pol  *policy

	mu        sync.Mutex
	inflight  int // handler slots in use or reserved by a claim in flight
	finishing int // jobs whose handler returned, finish not settled yet

	wmMu    sync.Mutex
	wm      bandTimes // see watermarks
	wmSince time.Time
	slotCh  chan struct{} // a handler slot freed
	wakeCh  chan struct{} // NOTIFY: new jobs in this queue
}

func newQueueRunner(w *Worker, name string, cfg QueueConfig) *queueRunner {
	return &queueRunner{w: w, name: name, cfg: cfg, pol: newPolicy(cfg.Fairness),
		slotCh: make(chan struct{}, 1), wakeCh: make(chan struct{}, 1)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (q *queueRunner) wake() { signal(q.wakeCh) }

// reserve takes up to max free slots for a claim about to run (0 when none are free).
// Reserved slots count as in flight, so concurrent claims of one queue can never together
// take more jobs than the queue has free handler slots. Jobs whose handler returned but whose
// finish has not landed yet still belong to this worker: handlers plus those stay under
// 4 × Concurrency, so a slow database pushes back on claiming instead of piling up owned jobs
// whose leases run while their finishes queue.
func (q *queueRunner) reserve(max int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(q.cfg.Concurrency-q.inflight, 4*q.cfg.Concurrency-q.inflight-q.finishing, max)
	if n <= 0 {
		return 0
	}
	q.inflight += n
	return n
}

// handlerReturned moves a job from a handler slot to the finishing set.
func (q *queueRunner) handlerReturned() {
	q.mu.Lock()
	q.inflight--
	q.finishing++
	q.mu.Unlock()
	signal(q.slotCh)
}

// finishingStuck counts the late return of a handler declared stuck (its slot was already
// given back) among the jobs waiting for their finish.
func (q *queueRunner) finishingStuck() {
	q.mu.Lock()
	q.finishing++
	q.mu.Unlock()
}

// finished drops a job from the finishing set once its finish was written or rejected.
func (q *queueRunner) finished() {
	q.mu.Lock()
	q.finishing--
	q.mu.Unlock()
	signal(q.slotCh)
}

// unreserve gives back the reserved slots a claim did not fill.
func (q *queueRunner) unreserve(n int) {
	if n <= 0 {
		return
	}
	q.mu.Lock()
	q.inflight -= n
	q.mu.Unlock()
	signal(q.slotCh)
}

func (q *queueRunner) releaseSlot() {
	q.mu.Lock()
	q.inflight--
	q.mu.Unlock()
	signal(q.slotCh)
}

// loop is one claimer of the queue; a queue runs Claimers of them, so a claim can be in
// flight while the previous one's jobs start, which keeps short handlers fed without ever
// claiming beyond the free slots.
func (q *queueRunner) loop() {
	w := q.w
	defer w.claimWG.Done()
	ctx := w.loops
	idle := time.Duration(0) // current empty-claim backoff
	for ctx.Err() == nil {
		n := q.reserve(w.cfg.MaxClaimBatch)
		if n == 0 {
			select {
			case <-q.slotCh:
			case <-ctx.Done():
			}
			continue
		}
		// A claim that commits must be dispatched even if Stop begins meanwhile: a claim cut
		// off by cancellation may still have committed, stranding its jobs until their lease
		// expired. So the statement runs to completion (bounded by a timeout), and whatever it
		// returns goes to handlers; the soft stop then waits for them.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		got, err := q.claim(cctx, n)
		cancel()
		q.unreserve(n - len(got))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.m.claimErrors.Add(1)
			w.log.Warn("tenure: claim failed", "queue", q.name, "err", err)
			idle = q.backoff(idle)
			q.sleep(ctx, idle, false)
			continue
		}
		if len(got) == 0 {
			w.m.emptyClaims.Add(1)
			idle = q.backoff(idle)
			q.sleep(ctx, idle, true)
			continue
		}
		idle = 0
		for i := range got {
			w.dispatch(q, &got[i])
		}
		if len(got) == n {
			q.wake() // there may be more: let an idle sibling claimer start too
			continue
		}
		// Short claim: the queue has nothing more claimable right now. Wait for a NOTIFY
		// or the first poll rather than asking again at once.
		idle = w.cfg.FetchPollMin
		q.sleep(ctx, idle, true)
	}
}

// backoff doubles the idle wait from FetchPollMin to FetchPollMax.
func (q *queueRunner) backoff(cur time.Duration) time.Duration {
	if cur == 0 {
		return q.w.cfg.FetchPollMin
	}
	return min(cur*2, q.w.cfg.FetchPollMax)
}

// sleep waits d with ±50% jitter, or until a NOTIFY (when wakeable) or stop.
func (q *queueRunner) sleep(ctx context.Context, d time.Duration, wakeable bool) {
	d = d/2 + time.Duration(rand.Int64N(int64(d)+1))
	t := time.NewTimer(d)
	defer t.Stop()
	wake := q.wakeCh
	if !wakeable {
		wake = nil
	}
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
	}
}

// claim runs the queue's claim statement for up to n jobs.
func (q *queueRunner) claim(ctx context.Context, n int) ([]claimed, error) {
	w := q.w
	start := time.Now()
	after := q.watermarks()
	var rows []gen.ClaimStrictRow
	exact := true // the statement locked only what it claimed, so it may move the watermarks
	var err error
	if q.cfg.Fairness.Strict() && after == (bandTimes{}) {
		// No watermark yet (idle queue, or just after the periodic reset): strict order in
		// one index scan, no segments to plan.
		rows, err = w.q.ClaimStrict(ctx, gen.ClaimStrictParams{WorkerID: w.cfg.ID, Queue: q.name, Batch: int32(n)})
	} else {
		rows, exact, err = q.claimSegments(ctx, n, after)
	}
	if err != nil {
		return nil, err
	}
	out := make([]claimed, len(rows))
	for i, r := range rows {
		out[i] = fromClaimRow(r)
	}
	if exact {
		// ClaimSegments locks more candidates than it claims, and a concurrent claimer that
		// skipped those (locked, but then left ready) must not be allowed to jump past them.
		q.advance(out)
	}
	w.m.claims.Add(1)
	w.m.claimAsked.Add(int64(n))
	w.m.claimed.Add(int64(len(out)))
	w.m.claimLatency.Record(time.Since(start))
	for i := range out {
		w.m.recordWait(out[i].queue, out[i].priority, out[i].attemptedAt.Sub(out[i].runAt))
	}
	return out, nil
}

// claimSegments claims through the fairness policy's segments: ClaimOrdered when they can be
// served in order (exact: it locks only what it claims), ClaimSegments when the database must
// rank them together (quotas, deadlines). It reports the claim back to the policy.
func (q *queueRunner) claimSegments(ctx context.Context, n int, after bandTimes) ([]gen.ClaimStrictRow, bool, error) {
	w := q.w
	segs, quota, ranked := q.pol.plan(n)
	var prio []int16
	var afterUs, minAgeUs, maxAge []int64
	for _, s := range segs {
		prio = append(prio, int16(s.priority))
		afterUs = append(afterUs, after[s.priority])
		minAgeUs = append(minAgeUs, s.minAge.Microseconds())
		maxAge = append(maxAge, maxAgeUs(s.maxAge))
	}
	var rows []gen.ClaimStrictRow // every claim statement returns the same columns
	if !ranked {
		got, err := w.q.ClaimOrdered(ctx, gen.ClaimOrderedParams{WorkerID: w.cfg.ID, Queue: q.name, Batch: int32(n),
			SegPriority: prio, SegAfterUs: afterUs, SegMinAgeUs: minAgeUs, SegMaxAgeUs: maxAge})
		if err != nil {
			return nil, false, err
		}
		for _, r := range got {
			rows = append(rows, gen.ClaimStrictRow(r))
		}
	} else {
		arg := gen.ClaimSegmentsParams{WorkerID: w.cfg.ID, Queue: q.name, Batch: int32(n),
			SegPriority: prio, SegAfterUs: afterUs, SegMinAgeUs: minAgeUs, SegMaxAgeUs: maxAge}
		for _, s := range segs {
			arg.SegLimit = append(arg.SegLimit, int32(s.limit))
			arg.SegRank = append(arg.SegRank, int32(s.rank))
			arg.SegQuota = append(arg.SegQuota, int32(s.quota))
		}
		got, err := w.q.ClaimSegments(ctx, arg)
		if err != nil {
			return nil, false, err
		}
		for _, r := range got {
			rows = append(rows, gen.ClaimStrictRow(r))
		}
	}
	var perBand bandCounts
	for _, r := range rows {
		if p := int(r.Priority); p >= minPriority && p <= maxPriority {
			perBand[p]++
		}
	}
	q.pol.observe(n, quota, &perBand)
	return rows, !ranked, nil
}

// Watermarks. Claims take each band's jobs oldest first, so once a claim took a band's job
// due at T, every ready job of that band due before T was claimed too (or was locked by
// another claimer at that instant). The next claims then start the band's index range at T:
// the index entries left behind by claimed rows (dead versions only VACUUM removes, and which
// pile up at the front of the range, faster still while a long transaction holds back the
// xmin horizon) are never walked again. A job that becomes ready behind the watermark anyway
// (inserted by a transaction that started earlier and committed later, an explicit RunAt in
// the past, or a row an operator had locked) is found by the periodic full scan: the
// watermarks reset every watermarkReset.
const watermarkReset = time.Second

type bandTimes [maxPriority + 1]int64 // unix microseconds per band; 0 = from the start

// watermarks returns the bands' lower bounds for the next claim.
func (q *queueRunner) watermarks() bandTimes {
	q.wmMu.Lock()
	defer q.wmMu.Unlock()
	if time.Since(q.wmSince) >= watermarkReset {
		q.wm, q.wmSince = bandTimes{}, time.Now()
	}
	return q.wm
}

// advance moves each band's watermark to the newest due time it just claimed.
func (q *queueRunner) advance(got []claimed) {
	q.wmMu.Lock()
	defer q.wmMu.Unlock()
	for i := range got {
		p, t := got[i].priority, got[i].runAt.UnixMicro()
		if p >= minPriority && p <= maxPriority && t > q.wm[p] {
			q.wm[p] = t
		}
	}
}

func maxAgeUs(d time.Duration) int64 {
	if d == 0 {
		return (100 * 365 * 24 * time.Hour).Microseconds()
	}
	return d.Microseconds()
}

func fromClaimRow(r gen.ClaimStrictRow) claimed {
	return claimed{id: r.ID, queue: r.Queue, kind: r.Kind, payload: r.Payload, version: int(r.PayloadVersion),
		priority: int(r.Priority), runAt: r.RunAt, createdAt: r.CreatedAt, attemptedAt: deref(r.AttemptedAt),
		lockedUntil: deref(r.LockedUntil), attempt: int(r.Attempts), maxAttempts: int(r.MaxAttempts),
		lease: time.Duration(r.LeaseMs) * time.Millisecond, token: derefUUID(r.ClaimToken), generation: r.Generation}
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func derefUUID(u *uuid.UUID) uuid.UUID {
	if u == nil {
		return uuid.Nil
	}
	return *u
}
