package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/locks"
	"github.com/tenureq/tenure/jobs"
)

// This file is flow control (docs/guide.md, "Concurrency limits" and "Rate limits"): limits on
// how many jobs run at once and how many start per period, cluster-wide, enforced inside the
// claim.
//
// A queue whose limits are all concurrency limits without PerKey and without Rate, and whose
// fairness does not rank (no Quotas, no Deadline), claims under per-worker permits
// (permits.go, permitMode), with its own proof. Every other queue with limits (a PerKey or a
// Rate limit, or a ranking policy) claims counted (countedMode): one transaction, one function
// (countedMode.run), whose lock scope is an argument, in one of two ways:
//   - exclusive: ClaimLimitsLock (transaction-scoped advisory locks on all limitStripes of the
//     queue's limit stripes, in order) and ClaimLimited, sent in one pipeline (one round trip,
//     one implicit transaction). ClaimLimited counts the groups' running, leased, marked jobs
//     (limited = true, through jobs_limited_idx) and window starts, claims within their room,
//     and marks the rows it claims of kinds a concurrency limit covers;
//   - striped: the same with one stripe; it admits at most stripeGroupCap per group and keeps
//     stripeReserve of every group's room for the claims it cannot see.
//
// Grants (ClaimGranted, ClaimGrantsLock, tenure.flow_grant) served concurrency-only queues
// whose limit was above 1,000 until issue 28: permits now serve every such queue whatever its
// limit (measured: BurnDown strict-limits, MaxRunning 1,000,000, 0.98 and 0.83 of strict under
// permits against 0.65 and 0.71 under grants; 4 workers x 500 slots under 1,500: 2,491 and
// 2,570 jobs/s against 2,339 and 2,392), so the grant paths were retired. The table stays
// (dropping it is a migration for later); nothing reads or writes it.
//
// The proof. For a group G of a limit, write marked for G's running, leased, marked jobs (for a
// rate limit: the starts in the current window, in tenure.flow). The guarantee is marked ≤ the
// limit at every instant. (Jobs started by a worker that does not configure the limit are not
// marked and are not counted, as documented.) Each event keeps it:
//   - a finish, release or lease expiry only lowers marked (a window's starts only reset when
//     a new window begins);
//   - an exclusive claim holds every stripe from before ClaimLimited's snapshot until after its
//     commit. Every claim that marks rows (or adds starts) holds a stripe, and PostgreSQL makes
//     a commit visible before it releases the transaction's locks, so its snapshot sees every
//     such claim that committed before, and none commits until it does. It counts marked = M
//     exactly and admits k ≤ limit − M: marked ≤ the limit after its commit;
//   - a striped claim X: take, at any instant, the committed striped claim with the latest
//     snapshot. Exclusive claims hold every stripe (none overlaps X), and every other claim X
//     does not see took its snapshot before X's and committed after it, so it held a stripe at
//     X's snapshot: at most one per other stripe (limitStripes−1), each admitting at most
//     stripeGroupCap per group. X admits at most stripeGroupCap and only within the room less
//     (limitStripes−1)·stripeGroupCap, so marked stays within the limit.
//
// A single statement that locked and counted could not do this: its snapshot would be taken
// before it waited for the lock.
//
// The invariants, where each is kept, and the test that fails when it breaks:
//
//	(L1) a group of a concurrency limit has at most MaxRunning running, leased jobs (per
//	     concurrency key with PerKey) — the proof above; kept by ClaimLimited's grp, hit and
//	     picked (exclusive: exact counts under every stripe; striped: room less stripeReserve,
//	     at most stripeGroupCap per group). TestLimitStripedNearTheLimit,
//	     TestLimitOnePerKey (and TestLimitFreedBySIGKILL: a dead worker's room comes back with
//	     its leases), TestLimitWithQuotas (a ranked claim under a limit).
//	(L2) a group of a rate limit has at most Rate starts per window [k·Per, (k+1)·Per) of the
//	     database clock: ClaimLimited reads the group's starts in the window of its statement's
//	     clock_timestamp() from tenure.flow (a row of an older window counts 0, of a newer one
//	     counts Rate: no room), admits within Rate less them, adds what it admitted to the same
//	     row in the same statement (INSERT .. ON CONFLICT: a concurrent writer's row is waited
//	     for and added to, never overwritten) and stamps attempted_at with that clock; the
//	     proof above with marked = the window's starts. TestRateLimitWindows,
//	     TestRateLimitWindowsOnAFakeDatabaseClock (window edges on a database clock the test
//	     moves).
//	(L3) no job of a group paused by RetryAfter (RetryAfterPauses) starts before blocked_until:
//	     its room is 0 in ClaimLimited and ClaimPermitted. TestRetryAfterPausesKey.
//	(P)  permits (permits.go): Σ_w max(U_w, P_w) ≤ MaxRunning for each limit of a permit
//	     queue. TestPermitAccounting, TestPermitAllocationRace,
//	     TestPermitAllocatingClaimsDoNotOverlap, TestPermitClaimersOfOneWorker,
//	     TestLimitPermitsNearTheLimit, TestLimitPermitsLargeLimit, TestLimitGlobalAcrossWorkers.
//
// Mode choice (a hint for speed; every claim keeps the limit on its own): a queue starts
// exclusive; a claim that held nothing back and saw every counted group's room at least
// stripeFarRoom after its batch makes the next claims striped; anything else, exclusive. The
// choice is countedMode's state, owned by the queue loop: the claim goroutines report what they
// saw (claimFeedback) and the loop plans the next claim (claimmode.go).
//
// Queues without limits claim with ClaimOrdered (no lock, no extra index entry).

// limitArgs are a queue's limits as the claim statement's parallel arrays (built once, at New).
type limitArgs struct {
	id                 []int32
	kind               []string
	perKey             []bool
	maxRunning, rate   []int32
	periodUs           []int64
	concurrencyLimited map[string]bool // kinds a MaxRunning covers ("" = all)
	// pollCap bounds a claimer's backoff after a claim a limit held back: a quarter of the
	// shortest rate window (a new window brings room no local event announces); 0 without
	// rate limits (the usual FetchPollMax).
	pollCap time.Duration
	// concurrencyOnly: every limit is a concurrency limit without PerKey and without Rate
	// (with a policy that does not rank, the queue claims under permits: usesPermits).
	concurrencyOnly bool
	// permits: the queue claims under per-worker permits (permits.go) and never takes the
	// counted paths below.
	permits bool
}

func newLimitArgs(ls []Limit) *limitArgs {
	if len(ls) == 0 {
		return nil
	}
	a := &limitArgs{concurrencyLimited: map[string]bool{}, concurrencyOnly: true}
	for i, l := range ls {
		if l.PerKey || l.Rate > 0 || l.MaxRunning == 0 {
			a.concurrencyOnly = false
		}
		a.id = append(a.id, int32(i))
		a.kind = append(a.kind, l.Kind)
		a.perKey = append(a.perKey, l.PerKey)
		a.maxRunning = append(a.maxRunning, int32(l.MaxRunning))
		a.rate = append(a.rate, int32(l.Rate))
		a.periodUs = append(a.periodUs, l.Per.Microseconds())
		if l.MaxRunning > 0 {
			a.concurrencyLimited[l.Kind] = true
		}
		if l.Rate > 0 && (a.pollCap == 0 || l.Per/4 < a.pollCap) {
			a.pollCap = l.Per / 4
		}
	}
	return a
}

// Stripes: limitStripes locks per queue; a striped claim admits at most stripeGroupCap jobs
// per group and keeps (limitStripes-1)·stripeGroupCap of every group's room for the claims it
// cannot see. A queue claims striped while its last limited claim held nothing back and saw
// every counted group's room at least stripeFarRoom after its batch.
const (
	limitStripes   = 4
	stripeGroupCap = 100
	stripeReserve  = (limitStripes - 1) * stripeGroupCap
	stripeFarRoom  = limitStripes * stripeGroupCap
	noCap          = 1 << 30
)

// limitScanFactor: an exclusive limited claim of n reads up to limitScanFactor·n candidates (in
// segment order), so candidates of a group whose room this batch exhausts do not leave it
// short. A striped claim reads n (each candidate read is row-locked, a WAL record).
const limitScanFactor = 2

// countedMode is the claim mode of a queue with limits that permits do not serve
// (claimmode.go). Its state, owned by the queue loop, only chooses the next claim's statement
// (every statement keeps the limits on its own): far, the last limited claim saw every group
// far from its limits, so the next may be striped.
type countedMode struct {
	far bool
}

// plan chooses the claim (loop): exclusive unless the last claim was far from every limit,
// then striped on the claimer's stripe.
func (m *countedMode) plan(_ *queue, p *claimPlan) {
	p.exclusive = !m.far
}

// learn records whether the claim saw every group far from its limits (loop).
func (m *countedMode) learn(_ *queue, r *claimResult) {
	if r.err == nil {
		m.far = r.fb.far
	}
}

// run runs a limited claim (claim goroutine): ClaimLimitsLock (every stripe when exclusive,
// else the claimer's) then ClaimLimited, in one pipeline.
func (m *countedMode) run(ctx context.Context, q *queue, p *claimPlan) ([]claimRow, claimFeedback, error) {
	la := q.limits
	first, last := q.w.sch.LimitsClass(), q.w.sch.LimitsClass()+limitStripes-1
	reserve, groupCap := int32(0), int32(noCap)
	scan := min(p.n*limitScanFactor, 10000)
	if !p.exclusive {
		scan = p.n // far from every limit: nothing is expected to be held back
		first = q.w.sch.LimitsClass() + int32(p.stripe%limitStripes)
		last, reserve, groupCap = first, stripeReserve, stripeGroupCap
	}
	// Ranked plans (quotas, deadline) read every segment up to its own limit (orderedParams).
	base := orderedParams(q, p, scan)
	db := &AfterLock{Pool: q.w.eng, Sch: q.w.sch, Locks: []LockedStatement{LockStatement(ctx, q.name, first, last)}}
	// The completions ride after the lock (claim.go): the claim's count sees the room they free.
	landed := rideOn(ctx, db, p.done)
	got, err := gen.New(db).ClaimLimited(ctx, gen.ClaimLimitedParams{Reserve: reserve, GroupCap: groupCap,
		WorkerID: base.WorkerID, Queue: base.Queue, Batch: base.Batch, Scan: base.Scan,
		SegPriority: base.SegPriority, SegAfterUs: base.SegAfterUs, SegMinAgeUs: base.SegMinAgeUs, SegMaxAgeUs: base.SegMaxAgeUs,
		SegLimit: base.SegLimit, SegRank: base.SegRank, SegQuota: base.SegQuota,
		Kinds: base.Kinds, KindVersions: base.KindVersions, KindLeaseMs: base.KindLeaseMs,
		LimID: la.id, LimKind: la.kind, LimPerKey: la.perKey, LimMaxRunning: la.maxRunning, LimRate: la.rate, LimPeriodUs: la.periodUs,
	})
	if err != nil {
		return nil, claimFeedback{}, err
	}
	rows, feedback := OwnedRows(got)
	var f limitedFeedback
	if err := DecodeFeedback(feedback, &f); err != nil {
		return nil, claimFeedback{}, err
	}
	return rows, claimFeedback{binding: f.Binding, skipped: f.Binding, far: f.far(), doneLanded: landed}, nil
}

// limitedFeedback is ClaimLimited's feedback (its comment in db/queries.sql).
type limitedFeedback struct {
	Binding bool  `json:"binding"`
	MinRoom int32 `json:"min_room"`
}

// far reports whether the queue's next limited claim may be striped: this one held nothing
// back and saw every counted group's room at least stripeFarRoom after its batch.
func (f limitedFeedback) far() bool {
	return !f.Binding && f.MinRoom >= stripeFarRoom
}

// flowBlock pauses the groups of e's job covered by limits with RetryAfterPauses for d (a
// handler returned RetryAfter). It runs on the handler goroutine before the failure is
// reported; an error is logged, not fatal (the job's own retry still waits d).
func (w *Engine) flowBlock(e *Execution, d time.Duration) {
	q := e.q
	if q == nil || d <= 0 {
		return
	}
	var kinds, keys []string
	key := e.c.Metadata[jobs.ConcurrencyKeyMetadata]
	for _, l := range q.cfg.Limits {
		if !l.RetryAfterPauses || (l.Kind != "" && l.Kind != e.c.Kind) {
			continue
		}
		switch {
		case !l.PerKey:
			kinds, keys = append(kinds, l.Kind), append(keys, "")
		case key != "":
			kinds, keys = append(kinds, l.Kind), append(keys, key)
		}
	}
	if len(kinds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(w.engCtx, w.firstFinishDeadline())
	defer cancel()
	if err := w.q.FlowBlock(ctx, gen.FlowBlockParams{Queue: q.name, DelayUs: d.Microseconds(), Kinds: kinds, GroupKeys: keys}); err != nil {
		w.log.Warn("tenure: could not pause the job's limit groups after RetryAfter", "job_id", e.c.ID, "kind", e.c.Kind, "err", err)
		return
	}
	w.m.FlowBlocks.Add(1)
}

// Pruning tenure.flow. A rate limit per key leaves one row per key it ever saw, and a RetryAfter
// pause one per group it paused; a row whose window is over and whose pause has passed carries
// nothing a claim would read (a claim treats a missing row and an old window alike: no starts in
// the current window, no pause). The reclaim service (reclaim.go) runs a pass every PruneEvery:
// for each queue the worker serves, steps of FlowPrune through the queue's rows in key order,
// at most flowPruneSteps statements of flowPruneBatch rows per pass, continuing where the last
// pass stopped. Each step holds locks.FlowPrune (try, transaction scope): while another worker
// prunes, the pass ends.
//
// Why a racing claim loses no count, without the queue's limit stripes: the prune deletes a row
// only after locking it (FOR UPDATE SKIP LOCKED) and rechecking, on the row's latest committed
// version, that its window is over and its pause passed (READ COMMITTED re-evaluates the
// conditions of a locked row that changed). A claim that counted starts into the row (or
// FlowBlock that paused it) either committed before the prune locked it — the prune then sees
// the current window (or the pause) and keeps it — or has it locked — skipped —, or writes
// after the delete: its INSERT .. ON CONFLICT then waits for the pruner's commit and inserts a
// fresh row with the starts it adds (the deleted row's window was over, so they are the whole
// count of the current window). A claim whose snapshot still showed the deleted row read an
// over window as zero starts, as it would a missing row. Nothing counted is lost, and the
// concurrency count (jobs rows, flow_grant) is not touched.
const (
	flowPruneBatch = 1000
	flowPruneSteps = 20
)

// flowPruner is the reclaim service's pruning state: when the next pass is due and where each
// queue's walk stopped.
type flowPruner struct {
	next   time.Time
	cursor map[string][2]string
}

// maybePruneFlow runs a pass of the flow prune if one is due.
func (w *Engine) maybePruneFlow(ctx context.Context, fp *flowPruner) {
	now := w.clk.Now()
	if now.Before(fp.next) {
		return
	}
	fp.next = now.Add(w.cfg.PruneEvery)
	pctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	if _, err := w.pruneFlow(pctx, fp); err != nil && ctx.Err() == nil {
		w.m.PruneErrors.Add(1)
		w.engineError(&w.pruneLog, "flow prune", err)
	}
}

// PruneFlow runs one bounded pass of the tenure.flow prune over the worker's queues (from the
// start of each) and returns the rows it deleted. The worker runs it every PruneEvery; it is
// exported for operators and tests.
func (w *Engine) PruneFlow(ctx context.Context) (int, error) {
	if w.q == nil {
		return 0, errors.New("tenure: PruneFlow on a worker whose engine has not started")
	}
	return w.pruneFlow(ctx, &flowPruner{})
}

func (w *Engine) pruneFlow(ctx context.Context, fp *flowPruner) (int, error) {
	if fp.cursor == nil {
		fp.cursor = map[string][2]string{}
	}
	names := make([]string, 0, len(w.cfg.Queues))
	for name := range w.cfg.Queues {
		names = append(names, name)
	}
	slices.Sort(names)
	deleted, steps := 0, 0
	for _, name := range names {
		p := gen.FlowPruneParams{LockKey: w.sch.Key(locks.FlowPrune), Queue: name, Batch: flowPruneBatch,
			LimKind: []string{}, LimPerKey: []bool{}, LimPeriodUs: []int64{}}
		for _, l := range w.cfg.Queues[name].Limits {
			if l.Rate > 0 {
				p.LimKind, p.LimPerKey, p.LimPeriodUs = append(p.LimKind, l.Kind), append(p.LimPerKey, l.PerKey), append(p.LimPeriodUs, l.Per.Microseconds())
			}
		}
		for {
			if steps == flowPruneSteps {
				return deleted, nil
			}
			steps++
			c, ok := fp.cursor[name]
			p.FromStart, p.AfterKind, p.AfterKey = !ok, c[0], c[1]
			r, err := w.q.FlowPrune(ctx, p)
			if err != nil {
				return deleted, err
			}
			if !r.Locked {
				return deleted, nil // another worker is pruning
			}
			deleted += int(r.Deleted)
			if r.Scanned < flowPruneBatch {
				delete(fp.cursor, name) // the end of the queue's rows: the next pass starts over
				break
			}
			fp.cursor[name] = [2]string{r.LastKind, r.LastKey}
		}
	}
	return deleted, nil
}
