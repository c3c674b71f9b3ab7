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

	mu       sync.Mutex
	inflight int
	slotCh   chan struct{} // a handler slot freed
	wakeCh   chan struct{} // NOTIFY: new jobs in this queue
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
// take more jobs than the queue has free handler slots.
func (q *queueRunner) reserve(max int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(q.cfg.Concurrency-q.inflight, max)
	if n <= 0 {
		return 0
	}
	q.inflight += n
	return n
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
		if len(got) == n {
			q.wake() // there may be more: let an idle sibling claimer start too
		}
		for i := range got {
			w.dispatch(q, &got[i])
		}
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
	segs, quota := q.pol.plan(n)
	var out []claimed
	if segs == nil {
		rows, err := w.q.ClaimStrict(ctx, gen.ClaimStrictParams{WorkerID: w.cfg.ID, Queue: q.name, Batch: int32(n)})
		if err != nil {
			return nil, err
		}
		out = make([]claimed, len(rows))
		for i, r := range rows {
			out[i] = fromClaimRow(r)
		}
	} else {
		arg := gen.ClaimSegmentsParams{WorkerID: w.cfg.ID, Queue: q.name, Batch: int32(n)}
		for _, s := range segs {
			maxAge := s.maxAge
			if maxAge == 0 {
				maxAge = 100 * 365 * 24 * time.Hour
			}
			arg.SegPriority = append(arg.SegPriority, int16(s.priority))
			arg.SegMinAgeUs = append(arg.SegMinAgeUs, s.minAge.Microseconds())
			arg.SegMaxAgeUs = append(arg.SegMaxAgeUs, maxAge.Microseconds())
			arg.SegLimit = append(arg.SegLimit, int32(s.limit))
			arg.SegRank = append(arg.SegRank, int32(s.rank))
			arg.SegQuota = append(arg.SegQuota, int32(s.quota))
		}
		rows, err := w.q.ClaimSegments(ctx, arg)
		if err != nil {
			return nil, err
		}
		out = make([]claimed, len(rows))
		var got bandCounts
		for i, r := range rows {
			out[i] = fromClaimRow(gen.ClaimStrictRow(r)) // both claims return the same columns
			if p := int(r.Priority); p >= minPriority && p <= maxPriority {
				got[p]++
			}
		}
		q.pol.observe(n, quota, &got)
	}
	w.m.claims.Add(1)
	w.m.claimed.Add(int64(len(out)))
	w.m.claimLatency.Record(time.Since(start))
	for i := range out {
		w.m.recordWait(out[i].queue, out[i].priority, out[i].attemptedAt.Sub(out[i].runAt))
	}
	return out, nil
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
