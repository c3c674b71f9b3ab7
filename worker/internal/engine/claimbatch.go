package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenureq/tenure/db/gen"
)

// This file is the claim batcher: one goroutine per worker that carries the plain ordered
// claims of many queues to the database in one statement (db/queries.sql, ClaimOrderedMany).
//
// Each queue keeps its own loop and everything it owns (slots, watermarks, policy, backoff,
// pause, stop): the loop plans a claim exactly as before. Only the transport is shared. A
// claim that is a plain ordered one (no quotas or deadlines ranking segments, no fair share, no
// limits) does not get a claim goroutine: the loop hands its request — queue, batch, segments
// with their watermarks, the completions riding on it — to the batcher (startBatched; the
// intake never blocks), and the statement that carries it answers the loop with the same
// claimResult a claim goroutine would have sent (claimReq.answer). The batcher owns the
// pending requests; whenever fewer than claimBatchInFlight statements are running and
// a request is pending, it starts one statement for the pending requests, oldest first: at most
// one request per queue (two would pick the same rows: a statement does not skip its own
// locks), at most claimBatchRequests requests and claimBatchRows rows. A lone request leaves at
// once, and while statements are in flight new requests accumulate and leave together in the
// next one (natural batching, as the finishers batch completions).
//
// Cohorts: the requests a statement answers come back together — their loops start the
// handlers and, as slots free, claim again — but not at once, and the statement slot the
// answered statement frees is free at once. Started with the first few that came back, the
// next statement would carry those few and leave the rest of the cohort waiting a whole
// statement for the next slot: statements alternate small and large, and one-slot queues
// spend that wait idle. So a slot freed by a statement that carried k requests waits until k
// requests are pending, at most claimBatchLinger (2 ms), before it starts the next statement.
// Only such a slot waits: a request reaching an idle batcher leaves at once. Measured (issue 28
// item 3, 100 one-slot queues, alternating runs on the shared 2-core machine): statements per
// 20,000 jobs 728 → 532 (27 → 38 requests each), throughput +20-30 % in 6 of 6 alternations;
// 10 queues unchanged within noise.
//
// Fairness between queues: requests leave in arrival order, at most one per queue per
// statement, and a request's rows are bounded by its own batch (its queue's free slots, at most
// MaxClaimBatch), so a busy queue cannot take another's rows nor hold its requests back. The
// bound, counted in statements: of the statements the batcher starts after a request reaches
// it, at most ceil(A/k) + S do not carry it, where A is the number of requests of other queues
// pending ahead of it, S the number of its own queue's (at most Claimers-1), and k =
// min(claimBatchRequests, claimBatchRows/MaxClaimBatch) the requests a statement carries at
// least. A queue has at most Claimers requests pending, so a busy neighbour delays a request by
// at most ceil(Claimers/k) statements whatever its backlog (with the defaults, one statement:
// TestClaimBatchSmallQueueLeavesWithinTheBound).
// The cohort linger (below) delays a statement's start by at most claimBatchLinger and changes
// neither the order nor the bound.
//
// Errors and cancellation: a statement that fails fails every request in it (each loop gets
// the error as its claim's result and backs off as for any failed claim). A request
// whose caller's context ended before the batcher put it in a statement is answered with that
// error and never runs; once the batcher has stopped, a request is answered at once with
// errClaimBatcherGone. Once in a statement, its loop gets the statement's answer even if its
// own context ends: the statement runs under the engine context and claimTimeout (the
// same bounds as the caller's), so the wait is bounded, and rows it claimed always reach their
// queue's loop (which dispatches them, or gives them back through the release path once Stop
// has begun) instead of being stranded until their lease expires.
//
// A worker with a single queue never uses the batcher: every statement would carry one request
// of that queue, one goroutine hop later.
//
// Empty bands: a queue's batched claims skip the bands its recent claims found empty
// (BandSkip, worker/internal/engine/bandskip.go, has the rules and their cost).

const (
	// claimBatchInFlight is how many batched statements may run at once, so that one slow
	// statement does not stall every queue.
	claimBatchInFlight = 2
	// claimBatchRequests and claimBatchRows cap one statement: its requests and the rows
	// they may claim together.
	claimBatchRequests = 500
	claimBatchRows     = 2000
	// claimBatchLinger bounds how long a statement slot freed by a statement that carried k
	// requests waits for k requests to be pending before it starts the next statement (see
	// "Cohorts" above).
	claimBatchLinger = 2 * time.Millisecond
)

// errClaimBatcherGone answers the requests pending when the batcher stops (the engine
// context ended: Stop's deadline).
var errClaimBatcherGone = errors.New("tenure: claim batcher stopped")

// claimReq is one request: one queue's plain ordered claim.
type claimReq struct {
	ctx   context.Context // the caller's: ended before the request is sent, it does not run
	queue string
	n     int
	segs  []ClaimSeg
	// done: the queue's completions the statement carries (claim.go, "Completions ride on
	// claims").
	done []*Execution
	// The answer goes to exactly one of:
	//   - to: the loop of the queue that planned the claim (startBatched), as its claimResult
	//     for claimer idx, on to.claimedCh (buffered Claimers, and the queue has at most
	//     Claimers claims in flight: the send never blocks);
	//   - reply (1-buffered: the batcher never blocks on it): a caller waiting (sendClaim).
	to    *queue
	idx   int
	plan  claimPlan
	start time.Time // when the loop planned it (claimResult.took)
	reply chan claimReply
	// skipStart: the engine clock when the request was formed (BandSkip.Record).
	skipStart time.Time
	// arrived: how many statements the batcher had started when the request reached it.
	arrived int64
}

// answer delivers rep to the request's loop or caller. To a loop it is what a claim goroutine
// reported before the loop handed its plain ordered claims to the batcher itself: the bands
// found empty are recorded (BandSkip), the rows converted, and the result sent unless
// the loop has returned.
func (r *claimReq) answer(rep claimReply) {
	q := r.to
	if q == nil {
		r.reply <- rep
		return
	}
	q.skip.Record(r.segs, r.n, rep.rows, rep.err, r.skipStart)
	res := claimResult{idx: r.idx, n: r.n, plan: r.plan, fb: claimFeedback{doneLanded: rep.landed}, err: rep.err, took: time.Since(r.start)}
	if rep.err == nil {
		res.got = make([]claimed, len(rep.rows))
		for i := range rep.rows {
			res.got[i] = fromClaimRow(rep.rows[i], q.w.cfg.ID)
		}
	}
	select {
	case q.claimedCh <- res:
	case <-q.done:
	}
}

// claimIntake is where requests wait for the batcher: a list the senders append to and the
// batcher takes whole. A send never blocks (a queue loop sends its own claims: it must not
// wait for the batcher), and a burst of requests reaches the batcher in one take.
type claimIntake struct {
	mu     sync.Mutex
	reqs   []*claimReq
	closed bool          // the batcher has stopped: put refuses
	sig    chan struct{} // 1-buffered: requests are waiting
}

func newClaimIntake() *claimIntake { return &claimIntake{sig: make(chan struct{}, 1)} }

// put hands r to the batcher. It returns false, leaving r unanswered, once the batcher has
// stopped.
func (in *claimIntake) put(r *claimReq) bool {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return false
	}
	in.reqs = append(in.reqs, r)
	in.mu.Unlock()
	signal(in.sig)
	return true
}

// take appends the waiting requests to buf (batcher).
func (in *claimIntake) take(buf []*claimReq) []*claimReq {
	in.mu.Lock()
	buf = append(buf, in.reqs...)
	clear(in.reqs)
	in.reqs = in.reqs[:0]
	in.mu.Unlock()
	return buf
}

// close refuses further requests and returns those waiting (batcher, when it stops).
func (in *claimIntake) close() []*claimReq {
	in.mu.Lock()
	in.closed = true
	out := in.reqs
	in.reqs = nil
	in.mu.Unlock()
	return out
}

type claimReply struct {
	rows []claimRow
	err  error
	// landed: for the completions the statement carried (of every request: the map is the
	// statement's), whether each landed or was busy (claimFeedback.doneLanded).
	landed rideLanded
	// behind: how many statements the batcher started after the request reached it and before
	// the statement that carried it (the fairness bound above; tests read it).
	behind int64
}

// useClaimBatch reports whether a plan goes through the batcher: plain ordered claims only,
// on a worker serving more than one queue.
func (q *queue) useClaimBatch(p *claimPlan) bool {
	return q.w.claimIn != nil && q.cfg.Batched()
}

// batchSegs are a plain ordered plan's segments as a request carries them.
func batchSegs(p *claimPlan) []ClaimSeg {
	segs := make([]ClaimSeg, len(p.segs))
	for i, s := range p.segs {
		segs[i] = ClaimSeg{Priority: int16(s.Priority), AfterUs: p.after[s.Priority], MinAgeUs: s.MinAge.Microseconds(), MaxUs: maxAgeUs(s.MaxAge)}
	}
	return segs
}

// startBatched is startClaim for a plan that goes through the batcher (loop): it hands the
// request to the batcher, without a claim goroutine, leaving out the bands the queue's recent
// claims found empty unless the claim is full (a full claim reads every band from its start).
// The batcher's statement answers the loop directly (claimReq.answer).
func (q *queue) startBatched(ctx context.Context, idx int, p claimPlan) {
	segs := batchSegs(&p)
	now := q.w.clk.Now()
	if !p.full {
		segs = q.skip.Filter(segs, now, q.plainNotified.Load())
	}
	r := &claimReq{ctx: ctx, queue: q.name, n: p.n, segs: segs, done: p.done,
		to: q, idx: idx, plan: p, start: time.Now(), skipStart: now}
	if !q.w.claimIn.put(r) {
		r.answer(claimReply{err: errClaimBatcherGone})
	}
}

// claimBatched runs a plain ordered claim through the batcher and waits for its rows (tests:
// the loop's claims go through startBatched), leaving out the bands the queue's recent claims
// found empty unless full. It returns an error without claiming when ctx ends before the
// request is taken into a statement; once taken, it returns what the statement claimed even
// if ctx ended meanwhile.
func (q *queue) claimBatched(ctx context.Context, n int, segs []ClaimSeg, full bool) ([]claimRow, error) {
	rep := q.sendClaim(ctx, n, segs, full)
	return rep.rows, rep.err
}

// sendClaim is claimBatched, answering with the batcher's whole reply.
func (q *queue) sendClaim(ctx context.Context, n int, segs []ClaimSeg, full bool) claimReply {
	start := q.w.clk.Now()
	if !full {
		segs = q.skip.Filter(segs, start, q.plainNotified.Load())
	}
	r := &claimReq{ctx: ctx, queue: q.name, n: n, segs: segs, reply: make(chan claimReply, 1)}
	if !q.w.claimIn.put(r) {
		return claimReply{err: errClaimBatcherGone}
	}
	rep := <-r.reply
	q.skip.Record(segs, n, rep.rows, rep.err, start)
	return rep
}

// claimBatcher is the batcher goroutine. It owns the pending requests and the count of
// statements in flight; each statement runs on its own goroutine and answers its requests.
// It runs until the engine context ends, and then answers whatever is still pending.
func (w *Engine) claimBatcher(ctx context.Context) {
	in := w.claimIn
	var pending []*claimReq
	inFlight := 0
	var started int64 // statements started
	done := make(chan int, claimBatchInFlight)
	// The cohort linger: expect is how many requests the statement that finished last carried
	// (0: none expected), until lingerUntil; lingerC is armed while a free slot waits for them.
	expect := 0
	var lingerUntil time.Time
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var lingerC <-chan time.Time
	for {
		for inFlight < claimBatchInFlight && len(pending) > 0 {
			if expect > 0 && len(pending) < expect {
				if now := time.Now(); now.Before(lingerUntil) {
					if lingerC == nil {
						linger.Reset(lingerUntil.Sub(now))
						lingerC = linger.C
					}
					break
				}
			}
			expect = 0
			if lingerC != nil {
				linger.Stop()
				lingerC = nil
			}
			var take []*claimReq
			take, pending = pickClaimBatch(pending)
			if len(take) == 0 {
				continue // every request taken was already abandoned by its caller
			}
			inFlight++
			seq := started
			started++
			w.spawn(func() {
				w.runClaimBatch(ctx, take, seq)
				done <- len(take)
			})
		}
		select {
		case <-ctx.Done():
			for _, r := range append(pending, in.close()...) {
				r.answer(claimReply{err: errClaimBatcherGone})
			}
			return
		case <-in.sig:
			// Every request waiting: a burst leaves in one statement.
			n := len(pending)
			pending = in.take(pending)
			for _, r := range pending[n:] {
				r.arrived = started
			}
		case k := <-done:
			inFlight--
			expect, lingerUntil = k, time.Now().Add(claimBatchLinger)
		case <-lingerC:
			lingerC = nil
			expect = 0
		}
	}
}

// pickClaimBatch takes the next statement's requests from pending, oldest first: at most one
// per queue, claimBatchRequests requests and claimBatchRows rows. A request whose caller's
// context has ended is answered with its error and dropped. It returns the requests taken and
// those left pending, in order.
func pickClaimBatch(pending []*claimReq) (take, rest []*claimReq) {
	queues := make(map[string]bool, min(len(pending), claimBatchRequests))
	rows := 0
	for i, r := range pending {
		if len(take) >= claimBatchRequests || (len(take) > 0 && rows+r.n > claimBatchRows) {
			rest = append(rest, pending[i:]...)
			break
		}
		if err := r.ctx.Err(); err != nil {
			r.answer(claimReply{err: err})
			continue
		}
		if queues[r.queue] {
			rest = append(rest, r) // a later statement: this one has a request of its queue
			continue
		}
		queues[r.queue] = true
		rows += r.n
		take = append(take, r)
	}
	return take, rest
}

// noBitmap is sent before ClaimOrderedMany, in its pipeline and transaction (AfterLock: one
// round trip, committed at its Sync like an autocommitted statement): bitmap scans off for
// that transaction. Each request's probe is parameterized by the request (its queue and band);
// where a queue's band holds a few hundred ready jobs, the generic plan estimates one row per
// probe and then prefers a bitmap scan plus a sort of every ready job of the band (reading them
// all) to the ordered walk of jobs_ready_idx that stops at the first unlocked ones (measured:
// 50 requests of one job over 100 queues of 400 ready jobs, 21,160 buffers against 1,017).
// The connection caches the plan at the statement's first execution, under the same setting.
var noBitmap = []LockedStatement{{SQL: "SELECT set_config('enable_bitmapscan', 'off', true)"}}

// runClaimBatch runs one ClaimOrderedMany for reqs, the batcher's statement number seq
// (0-based, in the order started), and answers each request with its rows, or every request
// with the statement's error.
func (w *Engine) runClaimBatch(ctx context.Context, reqs []*claimReq, seq int64) {
	k := &w.kinds
	arg := gen.ClaimOrderedManyParams{WorkerID: w.cfg.ID, Kinds: k.names, KindVersions: k.versions, KindLeaseMs: k.leaseMs}
	var done []*Execution
	for _, r := range reqs {
		done = append(done, r.done...)
		arg.ReqQueue = append(arg.ReqQueue, r.queue)
		arg.ReqBatch = append(arg.ReqBatch, int32(r.n))
		arg.ReqSegLo = append(arg.ReqSegLo, int32(len(arg.SegPriority)+1))
		for _, s := range r.segs {
			arg.SegPriority = append(arg.SegPriority, s.Priority)
			arg.SegAfterUs = append(arg.SegAfterUs, s.AfterUs)
			arg.SegMinAgeUs = append(arg.SegMinAgeUs, s.MinAgeUs)
			arg.SegMaxAgeUs = append(arg.SegMaxAgeUs, s.MaxUs)
		}
		arg.ReqSegHi = append(arg.ReqSegHi, int32(len(arg.SegPriority)))
	}
	cctx, cancel := context.WithTimeout(ctx, w.claimDeadline())
	var got []*gen.ClaimOrderedManyRow
	var landed rideLanded
	err := w.retryStale(func() (err error) {
		// The requests' completions ride in the statement's transaction, in one CompleteMany.
		db := &AfterLock{Pool: w.eng, Sch: w.sch, Locks: noBitmap}
		landed = rideOn(cctx, db, done)
		got, err = gen.New(db).ClaimOrderedMany(cctx, arg)
		return err
	})
	cancel()
	w.m.ClaimBatches.Add(1)
	w.m.ClaimBatchRequests.Add(int64(len(reqs)))
	if err != nil {
		for _, r := range reqs {
			r.answer(claimReply{err: err, behind: seq - r.arrived})
		}
		return
	}
	rows, _ := OwnedRows(got)
	out := make([][]claimRow, len(reqs))
	// A statement carries at most one request per queue (pickClaimBatch), so a row's queue
	// names its request. (Found by a map: a search of the requests for each row was quadratic,
	// 500 requests × 500 rows.)
	byQueue := make(map[string]int, len(reqs))
	for i, r := range reqs {
		byQueue[r.queue] = i
	}
	for _, g := range rows {
		i, ok := byQueue[deref0(g.Queue)]
		if !ok {
			// Cannot happen (each request claims from its own queue). The row is this worker's
			// now and no request of this statement can take it: report the defect; the lease
			// sweep gives the job back.
			w.engineError(&w.claimLog, "batched claim", fmt.Errorf("tenure: job %d of queue %q returned for no request", deref0(g.ID), deref0(g.Queue)))
			continue
		}
		out[i] = append(out[i], g)
	}
	for i, r := range reqs {
		r.answer(claimReply{rows: out[i], landed: landed, behind: seq - r.arrived})
	}
}
