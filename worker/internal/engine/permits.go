package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/dbschema"
)

// This file is flow control for concurrency limits: permits (docs/design.md, "Flow
// control"; docs/guide.md, "Concurrency limits").
//
// Why. A queue whose limit is about the size of the fleet's slots (4 workers × 10 slots under
// MaxRunning 40) runs next to its limit all the time. Counted claims (limits.go) must then be
// exclusive: each holds the queue's limit stripes from before its count until after its commit,
// WAL flush included, so the claims of every worker of the queue take turns, and as slots free
// one at a time each takes about one job. Measured (make bench-fairness, limits part): 0.65 of
// the throughput without the limit. Permits split the limit between the workers instead, so
// each claims against its own share, under its own row's lock, in parallel with the others, and
// completes its finished limited jobs in the transaction that claims their successors: 0.975
// (bench/results/limits-2026-12-01-permits.md).
//
// Which queues. A queue is in permit mode when every limit is a concurrency limit without
// PerKey and without Rate and its fairness does not rank (no Quotas, no Deadline), whatever
// MaxRunning. All its limited claims are permit claims; it never takes the counted paths of
// limits.go (exclusive, striped claims), whose accounting does not know permits. Every worker
// serving the queue must configure the same limits (as for every limit). Until issue 28 a
// MaxRunning above 1,000 took the counted paths with grants instead (limits.go says why they
// were retired).
//
// State. A tenure.flow_permit row per (queue, worker, limit kind): amount, want (the worker's
// slots for the queue), expires_at. Write, for a limit L and a worker w, U_w for w's running,
// leased, marked jobs L covers (jobs_limited_idx; a permit claim marks what it claims) and P_w
// for w's amount (0 without a row). The invariant, at every instant:
//
//	(P) Σ_w max(U_w, P_w) ≤ MaxRunning
//
// so the running, leased jobs L covers, Σ_w U_w, never exceed MaxRunning: the guarantee. Events:
//   - a finish, release, reclaim or lease expiry lowers some U_w: (P) holds;
//   - a permit transaction (permitTx: one pipeline, one commit) is one of two lock scopes with
//     the same statements after them. Without an allocation it holds w's rows (PermitLock)
//     from before ClaimPermitted's snapshot until its commit; with one it holds every stripe
//     and every permit row of the queue (ClaimLimitsLock on every stripe, PermitAllocateLock),
//     runs PermitAllocate, then ClaimPermitted;
//   - its allocation step: while it holds every row of the queue no other permit transaction is
//     in flight, so PermitAllocate's snapshot sees every U_w and P_w exactly (save finishes).
//     It may delete or lower other workers' rows (max(U_w, P_w) only falls) and sets its own
//     amount to at most MaxRunning less the others' Σ max(U_w, P_w): (P) holds after it.
//     Allocating transactions take every stripe, so they never overlap each other (two could
//     otherwise each insert a row the other cannot see and lock: an uncommitted insert).
//     TestPermitAllocatingClaimsDoNotOverlap, TestPermitAllocationRace;
//   - its claim step (ClaimPermitted, a later statement, so its snapshot includes its own
//     transaction's allocation): every claim of w holds w's rows (and only w claims for w), and
//     every change to P_w holds them too, so the snapshot sees U_w and P_w exactly, save
//     finishes that only lower U_w. It claims k ≤ P_w − U_w: max(U_w, P_w) stays P_w. With no
//     row it claims nothing. The allocation and the claim commit together: no instant shows
//     one without the other;
//   - a graceful stop deletes the worker's rows (PermitRelease): P_w falls, U_w still counts.
//
// Expiry is not part of the proof: a row whose expires_at has passed still counts until an
// allocation deletes it (under the lock its owner's claims need), and a worker's running jobs
// count in every allocation whether or not it has a row. Expiry only tells allocations which
// workers are gone: a claim renews its rows when less than permitRenewBelow of permitTTL is left.
//
// Policy (PermitAllocate). A worker allocates when it has no row, or when a claim was held back
// by its share while it has fewer than its slots and permitRegrow has passed since its last
// allocation. fair = MaxRunning / live rows (the others' unexpired rows and its own). If its
// amount is below least(want, fair), every other live row above fair is lowered to fair (those
// workers stop claiming past it; their running jobs still count until they end). It then gets
// least(want, what the others' holds leave). Expired rows are deleted. So a new worker gets its
// fair share as the others' jobs above it end (it asks again every permitOwedRegrow while it is
// owed some), and capacity a dead worker held comes back permitTTL after its last claim (its
// jobs' own leases count until they expire).
//
// Cost. A permit claim is two statements in one round trip (three with completions), the count
// of the worker's own running jobs of the limit and one row lock no other worker takes; one
// that allocates adds two lock statements and PermitAllocate to the same round trip and commit
// (until issue 28 the allocation was its own transaction: a round trip and a commit more). The
// count walks the queue's entries of jobs_limited_idx for the limit's kind (every worker's
// running, leased, marked jobs: at most min(MaxRunning, the fleet's slots), plus dead entries)
// and keeps this worker's: its cost grows with the fleet's running jobs, not with MaxRunning.
// Finishes of limited jobs do not linger, and each wakes a claimer when it lands (the share has
// room again).
//
// Which limits permits cannot hold (issue 28 asked whether they cover every limit shape). A
// PerKey limit bounds each concurrency key's running jobs, and keys are unbounded and unknown in
// advance: a share per (worker, key) would be a row per key per worker allocated on first sight,
// each first job of a key an allocating (queue-exclusive) transaction, which is the counted
// exclusive claim with more writes. A Rate limit bounds starts per window, which no count of
// running jobs (U_w) measures: a share of a window would have to be re-split every window and
// its unspent part is lost when a worker stops, so the counted claim's single row per window
// (tenure.flow, limits.go) stays both cheaper and exact. Large MaxRunning is permits' (measured).

// Permit timing: a row expires permitTTL after its owner's last renewal; a claim renews it when
// less than permitRenewBelow is left; a worker held back by its share asks for a larger one at
// most every permitRegrow, or every permitOwedRegrow while it holds less than its fair share.
const (
	permitTTL        = 10 * time.Second
	permitRenewBelow = 5 * time.Second
	permitRegrow     = time.Second
	permitOwedRegrow = 50 * time.Millisecond
)

// permitMode is the claim mode of a queue in permit mode (claimmode.go). Its state, owned by
// the queue loop, is its knowledge of this worker's permits (a hint: every claim reads the rows
// themselves), updated from the allocations the claims report (claimFeedback.alloc). One permit
// claim of the queue is in flight at a time (claimMore), so each plans from what the last one
// learnt. Like every claim, a permit claim completes the queue's successes waiting for it first
// (claimPlan.done; claim.go, "Completions ride on claims"): here the room they free in this
// worker's share is used at once, in the same transaction.
type permitMode struct {
	permitView
}

// permitView is what the loop knows of this worker's share, as a claim's plan carries it.
type permitView struct {
	have   bool      // the last allocation gave this worker a row for every limit
	amount int32     // the smallest amount it granted
	owed   bool      // it granted less than least(want, fair share) of some limit
	last   time.Time // when it ran
}

// permitAlloc is what an allocation granted (permitTx), for the loop to record.
type permitAlloc = permitView

// plan hands the claim the loop's view of the share (loop).
func (m *permitMode) plan(_ *queue, p *claimPlan) {
	p.exclusive = true // near the limit by design: limited finishes do not linger
	p.permit = m.permitView
}

// learn records the allocations the claim ran and whether it still has a permit (loop).
func (m *permitMode) learn(_ *queue, r *claimResult) {
	if r.fb.alloc != nil {
		m.permitView = *r.fb.alloc
	}
	if r.fb.lostPermit {
		m.have = false
	}
}

// usesPermits reports whether a queue with these limits and this fairness claims under permits.
func usesPermits(la *limitArgs, pol *Policy) bool {
	return la != nil && la.concurrencyOnly && !pol.Weighted() && pol.F.Deadline <= 0
}

// run runs a permit claim (claim goroutine): one permit transaction (permitTx), which
// allocates first when this worker holds no share; and, when the share held the claim back and
// may grow (or the claim found no row), one more permit transaction that allocates and claims
// the rest.
func (m *permitMode) run(ctx context.Context, q *queue, p *claimPlan) ([]claimRow, claimFeedback, error) {
	var fb claimFeedback
	view := p.permit
	allocate := !view.have
	base := orderedParams(q, p, p.n) // permit plans never rank (usesPermits)
	rows, f, landed, alloc, err := q.permitTx(ctx, allocate, p.n, base, p.done)
	if err != nil {
		return nil, fb, err
	}
	fb.doneLanded = landed
	if alloc != nil {
		fb.alloc, view = alloc, *alloc
	}
	if len(rows) < p.n && !allocate && (!f.HasPermit || (f.Binding && view.mayGrow(int32(q.cfg.Concurrency), q.w.clk.Now()))) {
		more, f2, _, alloc, err := q.permitTx(ctx, true, p.n-len(rows), base, nil)
		if err != nil {
			if len(rows) > 0 || len(p.done) > 0 {
				// The first transaction committed (its jobs are ours, its completions landed).
				fb.binding, fb.skipped = true, true
				return rows, fb, nil
			}
			return nil, fb, err
		}
		fb.alloc = alloc
		skipped := f.Skipped || (len(rows) > 0 && len(more) > 0 && f.Binding)
		rows, f = append(rows, more...), f2
		f.Skipped = f.Skipped || skipped
	}
	fb.lostPermit = !f.HasPermit
	fb.binding, fb.skipped = f.Binding && len(rows) < p.n, f.Skipped
	return rows, fb, nil
}

// mayGrow reports whether a worker with want slots, held back by its share, should ask for a
// larger one at now.
func (v permitView) mayGrow(want int32, now time.Time) bool {
	wait := permitRegrow
	if v.owed {
		// Below its fair share: the others were lowered to it and their room returns as their
		// jobs end; ask again soon rather than leave it idle.
		wait = permitOwedRegrow
	}
	return v.amount < want && now.Sub(v.last) >= wait
}

// permitFlags are a permit claim's flags: ClaimPermitted's feedback (its comment in
// db/queries.sql).
type permitFlags struct {
	HasPermit bool  `json:"has_permit"`
	Binding   bool  `json:"binding"`
	Skipped   bool  `json:"skipped"`
	RoomLeft  int32 `json:"room_left"`
}

// permitTx is the one permit transaction (claim goroutine), one pipeline, one commit:
//
//	allocate: ClaimLimitsLock (every stripe), PermitAllocateLock, PermitAllocate,
//	          [CompleteMany], ClaimPermitted
//	else:     PermitLock, [CompleteMany], ClaimPermitted
//
// The completions (done, when there are any) free room in the worker's share that the claim
// then uses, and both commit together (the table never shows the new jobs running beside the
// finished ones); ClaimPermitted, a later statement of the same transaction, claims under the
// share the allocation just wrote. It returns the rows, ClaimPermitted's flags, which
// completions landed (true) or were skipped because another session holds their rows (false),
// and, when it allocated, what the allocation granted.
func (q *queue) permitTx(ctx context.Context, allocate bool, n int, base gen.ClaimOrderedParams, done []*Execution) ([]claimRow, permitFlags, rideLanded, *permitAlloc, error) {
	la := q.limits
	var alloc *gen.PermitAllocateParams
	if allocate {
		alloc = &gen.PermitAllocateParams{LimKind: la.kind, LimMaxRunning: la.maxRunning,
			Queue: q.name, WorkerID: q.w.cfg.ID, Want: int32(q.cfg.Concurrency), TtlMs: int32(permitTTL.Milliseconds())}
	}
	db, granted := permitPipeline(ctx, q.w.eng, q.w.sch, q.name, base.WorkerID, alloc)
	landed := rideOn(ctx, db, done)
	got, err := gen.New(db).ClaimPermitted(ctx, gen.ClaimPermittedParams{LimKind: la.kind, LimMaxRunning: la.maxRunning,
		Queue: base.Queue, WorkerID: base.WorkerID, Batch: int32(n), Scan: int32(min(n*limitScanFactor, 10000)),
		SegPriority: base.SegPriority, SegAfterUs: base.SegAfterUs, SegMinAgeUs: base.SegMinAgeUs, SegMaxAgeUs: base.SegMaxAgeUs,
		KindVersions: base.KindVersions, Kinds: base.Kinds, KindLeaseMs: base.KindLeaseMs,
		TtlMs: int32(permitTTL.Milliseconds()), RenewBelowMs: int32(permitRenewBelow.Milliseconds())})
	if err != nil {
		return nil, permitFlags{}, nil, nil, err
	}
	rows, feedback := OwnedRows(got)
	var f permitFlags
	if err := DecodeFeedback(feedback, &f); err != nil {
		return nil, permitFlags{}, nil, nil, err
	}
	var a *permitAlloc
	if allocate {
		amount, owed := int32(noCap), false
		for _, r := range *granted {
			amount = min(amount, r.Amount)
			owed = owed || r.Amount < min(int32(q.cfg.Concurrency), r.Fair)
		}
		q.w.m.PermitAllocations.Add(1)
		a = &permitAlloc{have: len(*granted) == len(la.kind), amount: amount, owed: owed, last: q.w.clk.Now()}
	}
	return rows, f, landed, a, nil
}

// permitPipeline returns the pipeline of a permit transaction up to its completions and claim:
// the locks (this worker's permit rows; with an allocation, every stripe and every permit row of
// the queue) and, with alloc, PermitAllocate, whose rows land in *granted once the pipeline has
// run.
func permitPipeline(ctx context.Context, pool Batcher, sch *dbschema.Schema, queue, workerID string, alloc *gen.PermitAllocateParams) (*AfterLock, *[]*gen.PermitAllocateRow) {
	granted := new([]*gen.PermitAllocateRow)
	var c Capture
	if alloc == nil {
		_ = gen.New(&c).PermitLock(ctx, gen.PermitLockParams{Queue: queue, WorkerID: workerID})
		return &AfterLock{Pool: pool, Sch: sch, Locks: []LockedStatement{{SQL: c.SQL, Args: c.Args}}}, granted
	}
	_ = gen.New(&c).PermitAllocateLock(ctx, queue)
	db := &AfterLock{Pool: pool, Sch: sch, Locks: []LockedStatement{
		LockStatement(ctx, queue, sch.LimitsClass(), sch.LimitsClass()+limitStripes-1), {SQL: c.SQL, Args: c.Args}}}
	var a Capture
	_, _ = gen.New(&a).PermitAllocate(ctx, *alloc)
	db.Pre = append(db.Pre, PreStatement{LockedStatement{SQL: a.SQL, Args: a.Args}, func(rows pgx.Rows) error {
		for rows.Next() {
			var r gen.PermitAllocateRow
			if err := rows.Scan(&r.Kind, &r.Amount, &r.Fair, &r.Changed); err != nil {
				return err
			}
			*granted = append(*granted, &r)
		}
		return nil
	}})
	return db, granted
}

// releasePermits deletes this worker's permit rows when it stops gracefully (within ctx, at most
// 2 s); a failure only leaves them to expire.
func (w *Engine) releasePermits(ctx context.Context) {
	uses := false
	for _, q := range w.queues {
		uses = uses || (q.limits != nil && q.limits.permits)
	}
	if !uses || ctx.Err() != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := w.qon(w.eng).PermitRelease(rctx, w.cfg.ID); err != nil {
		w.log.Warn("tenure: releasing the worker's limit permits failed; they will expire", "err", err)
	}
}

// RunPermitAllocate runs the permit transaction with its allocation for p's worker and a
// claim of no job, and returns what the allocation granted: the allocation as the engine runs
// it, for package worker's tests (export_test.go).
func RunPermitAllocate(ctx context.Context, pool Batcher, sch *dbschema.Schema, p gen.PermitAllocateParams) ([]*gen.PermitAllocateRow, error) {
	db, granted := permitPipeline(ctx, pool, sch, p.Queue, p.WorkerID, &p)
	_, err := gen.New(db).ClaimPermitted(ctx, gen.ClaimPermittedParams{LimKind: p.LimKind, LimMaxRunning: p.LimMaxRunning,
		Queue: p.Queue, WorkerID: p.WorkerID, Batch: 0, Scan: 0,
		SegPriority: []int16{}, SegAfterUs: []int64{}, SegMinAgeUs: []int64{}, SegMaxAgeUs: []int64{},
		KindVersions: []int32{}, Kinds: []string{}, KindLeaseMs: []int32{}, TtlMs: p.TtlMs, RenewBelowMs: 0})
	if err != nil {
		return nil, err
	}
	return *granted, nil
}
