package worker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/internal/locks"
	"github.com/tenureq/tenure/jobs"
)

// This file is flow control (docs/guide.md, "Concurrency limits" and "Rate limits"): limits on
// how many jobs run at once and how many start per period, cluster-wide, enforced inside the
// claim.
//
// A queue with limits claims in one of three ways:
//   - exclusive: ClaimLimitsLock (transaction-scoped advisory locks on all limitStripes of the
//     queue's limit stripes, in order), ClaimGrantsLock (the queue's tenure.flow_grant rows, FOR
//     UPDATE) and ClaimLimited, sent in one pipeline (one round trip, one implicit transaction).
//     ClaimLimited counts the groups' running, leased, marked jobs (limited = true, through
//     jobs_limited_idx) and window starts, claims within their room, marks the rows it claims of
//     kinds a concurrency limit covers, and (re)grants budgets (below);
//   - striped: the same with one stripe and without the grant rows; it admits at most
//     stripeGroupCap per group and keeps stripeReserve of every group's room for the claims it
//     cannot see;
//   - grant (ClaimGranted, one statement, no advisory lock): only for a grantable queue (every
//     limit a concurrency limit without PerKey and without Rate). ClaimOrdered within the budget
//     an exclusive claim granted the claimer's stripe; it does not count and does not mark.
//
// Grants. Per limit L of a grantable queue and stripe s, a tenure.flow_grant row holds budget_s
// (jobs grant claims on s may still start) and spent_s (a bound on the jobs they started that
// may still run). Write marked for L's running, leased, marked jobs; unmarked for L's running,
// leased jobs grant claims started; S = Σ spent_s, B = Σ budget_s (committed values). Two
// invariants hold at every instant:
//
//	(I1) unmarked ≤ S            (I2) T := marked + S + B ≤ MaxRunning
//
// so L's running, leased jobs number marked + unmarked ≤ T ≤ MaxRunning: the guarantee. (Jobs
// started by a worker that does not configure the limit are neither marked nor granted and are
// not counted, as documented.) Each event keeps them:
//   - a finish, release or lease expiry only lowers marked or unmarked;
//   - a grant claim's UPDATE of its stripe's row (which waits for a concurrent holder and then
//     rechecks `budget >= k` on the row's latest committed version, READ COMMITTED) moves k from
//     budget to spent, and only if every limit's row allowed it does the same statement claim
//     the k jobs: T unchanged, unmarked and S both up by k. It reads no count, so its snapshot
//     does not matter; its jobs enter no index (the cost saved while far from the limit);
//   - an exclusive claim holds every stripe and every grant row from before ClaimLimited's
//     snapshot until after its commit. Every claim that marks rows holds a stripe and every
//     change to spent or budget holds a grant row, and PostgreSQL makes a commit visible before
//     it releases the transaction's locks, so its snapshot sees them all and nothing but
//     finishes changes them until it commits. It counts marked = M exactly, bounds unmarked by
//     U = S (I1) or, when that bound leaves less than batch + limitStripes·grantMin of room,
//     recounts U exactly (every unmarked running leased job L covers, through
//     jobs_running_idx), admits k ≤ MaxRunning − M − U, and writes spent = U (the recount, on
//     stripe 0; else unchanged) and budgets summing to at most MaxRunning − M − U − k (the rest
//     split over the stripes, granted only if each gets grantMin; otherwise 0, voiding what
//     was left). Then marked ≤ M + k, unmarked ≤ U ≤ S, and T ≤ MaxRunning;
//   - a striped claim counts marked + S + B as the group's running count (T at its snapshot).
//     Take, at any instant, the committed striped claim X with the latest snapshot. Grant claims
//     leave T unchanged, exclusive claims hold every stripe (none overlaps X), and every other
//     claim X does not see took its snapshot before X's and committed after it, so it held a
//     stripe at X's snapshot: at most one per other stripe (limitStripes−1), each adding at most
//     stripeGroupCap to T. X admits at most stripeGroupCap and only within the room less
//     (limitStripes−1)·stripeGroupCap, so T stays within the limit.
//
// Groups of per-key limits and of rate limits have no grants (S = B = 0): the exclusive and
// striped arguments above are the whole proof, with marked the group's running count, and for
// rate limits the window's starts in tenure.flow (written only under the stripes). A single
// statement that locked and counted could not do this: its snapshot would be taken before it
// waited for the lock. TestLimitGrants and TestLimitGrantRace check the accounting step by step
// and the wait for a grant claim in flight; TestLimitGrantsNearTheLimit, TestLimitStripedNearTheLimit
// and TestLimitGlobalAcrossWorkers check the guarantee with workers.
//
// The invariants, where each is kept, and the test that fails when it breaks (one each; the
// proofs are the paragraphs above, and permits.go's for (P)):
//
//	(L1) a group of a concurrency limit without PerKey has at most MaxRunning running, leased
//	     jobs — I1 and I2 above; kept by ClaimLimited's grp/hit/picked (exclusive: exact counts
//	     under every stripe and grant row; striped: room less stripeReserve, at most
//	     stripeGroupCap) and ClaimGranted's spend of budget. TestLimitGrantsNearTheLimit (grants
//	     then exclusive claims at 1,500; 1,700 with spent ignored), TestLimitGrants and
//	     TestLimitGrantRace (the accounting step by step), TestLimitStripedNearTheLimit,
//	     TestLimitGlobalAcrossWorkers.
//	(L2) the same per concurrency key of a PerKey limit (marked = the key's running, leased,
//	     marked jobs; S = B = 0): the exclusive and striped arguments. TestLimitOnePerKey (and
//	     TestLimitFreedBySIGKILL: a dead worker's room comes back with its leases).
//	(L3) a group of a rate limit has at most Rate starts per window [k·Per, (k+1)·Per) of the
//	     database clock: ClaimLimited reads the group's starts in the window of its statement's
//	     clock_timestamp() from tenure.flow (a row of an older window counts 0, of a newer one
//	     counts Rate: no room), admits within Rate less them, adds what it admitted to the same
//	     row in the same statement (INSERT .. ON CONFLICT: a concurrent writer's row is waited
//	     for and added to, never overwritten) and stamps attempted_at with that clock. Every
//	     claim that adds starts holds a stripe, so the exclusive and striped arguments apply
//	     with T = the window's starts. TestRateLimitWindows,
//	     TestRateLimitWindowsOnAFakeDatabaseClock (window edges on a database clock the test
//	     moves).
//	(L4) no job of a group paused by RetryAfter (RetryAfterPauses) starts before blocked_until:
//	     its room is 0 in ClaimLimited, ClaimGranted and ClaimPermitted. TestRetryAfterPausesKey.
//	(P)  permits (permits.go): Σ_w max(U_w, P_w) ≤ MaxRunning. TestPermitAccounting,
//	     TestPermitAllocationRace, TestPermitClaimersOfOneWorker, TestLimitPermitsNearTheLimit.
//
// Mode choice (a hint for speed; every claim keeps the limit on its own): a queue starts
// exclusive; an exclusive claim of a grantable queue that granted makes the next claims grant
// claims while their stripe's budget lasts (a grant claim that comes back short for lack of
// budget claims the rest exclusively at once); an exclusive or striped claim that held nothing
// back and saw every counted group's room at least stripeFarRoom after its batch makes the next
// claims striped; anything else, exclusive. The choice is countedMode's state, owned by the
// queue loop: the claim goroutines report what they saw (claimFeedback) and the loop decides
// the next plan (claimmode.go).
//
// Queues whose limits are all concurrency limits without PerKey and without Rate, each of at
// most permitMaxRunning, and whose fairness does not rank, take none of these paths: they claim
// under per-worker permits (permits.go), with their own proof.
//
// Queues without limits claim exactly as before (ClaimOrdered, no lock, no extra index entry).

// Limit bounds the jobs of one group of a queue, cluster-wide: at most MaxRunning running at
// once and at most Rate started per Per. A limit covers the jobs of Kind in the queue it is
// configured on ("" = every kind of the queue); with PerKey each concurrency key
// (jobs.InsertOpts.ConcurrencyKey) is a group of its own and jobs without a key are not covered.
//
// Every worker serving the queue must configure the same limits: each claims against the
// cluster-wide counts with its own configuration, and a worker without the limit claims
// without it (its jobs are then neither limited nor counted).
type Limit struct {
	// Kind is the job kind the limit covers; "" covers every kind of the queue.
	Kind string
	// PerKey makes each concurrency key a group of its own (e.g. "at most 2 per customer");
	// jobs without a key are not covered by the limit.
	PerKey bool
	// MaxRunning bounds the jobs of a group that are running with a lease that has not
	// expired (a job whose lease expired stops counting: its worker is presumed dead).
	// 1 gives "one at a time per group". 0 means no concurrency limit.
	MaxRunning int
	// Rate bounds the jobs of a group started (claimed) per Per, counted in fixed windows of
	// length Per aligned to the Unix epoch on the database clock. 0 means no rate limit;
	// Per is required with Rate.
	Rate int
	Per  time.Duration
	// RetryAfterPauses makes a handler's RetryAfter(err, d) on a job the limit covers pause
	// the job's whole group for d (no job of the group starts before then, on any worker),
	// not only retry that job after d: for remotes that rate-limit per account.
	RetryAfterPauses bool
}

// Limit configuration errors. Each is returned by New wrapped together with ErrInvalidConfig
// (errors.Is matches both) and names the queue and limit.
var (
	// ErrInvalidLimit: a Limit's numbers are out of range (MaxRunning or Rate negative or
	// above 1,000,000, a Rate without a Per of 1 ms..24 h or a Per without a Rate, neither
	// MaxRunning nor Rate set, Per not a whole number of microseconds) or its Kind is longer
	// than 128 bytes.
	ErrInvalidLimit = errors.New("tenure: invalid limit")
	// ErrDuplicateLimit: two limits of a queue cover the same group (same Kind and PerKey);
	// put both bounds in one Limit.
	ErrDuplicateLimit = errors.New("tenure: duplicate limit")
)

// maxLimitValue bounds MaxRunning and Rate.
const maxLimitValue = 1_000_000

// ConcurrencyKeyMetadata is the metadata entry a job's concurrency key is stored in (see
// jobs.InsertOpts.ConcurrencyKey).
const ConcurrencyKeyMetadata = jobs.ConcurrencyKeyMetadata

func validateLimits(queue string, q QueueConfig) error {
	if len(q.Limits) == 0 {
		return nil
	}
	type scope struct {
		kind   string
		perKey bool
	}
	seen := map[scope]bool{}
	for i, l := range q.Limits {
		bad := func(why string) error {
			return fmt.Errorf("%w: %w: queue %q limit %d (kind %q): %s", ErrInvalidConfig, ErrInvalidLimit, queue, i, l.Kind, why)
		}
		switch {
		case l.Kind != "" && (len(l.Kind) > 128):
			return bad("kind longer than 128 bytes")
		case l.MaxRunning < 0 || l.MaxRunning > maxLimitValue:
			return bad("MaxRunning outside 0..1000000")
		case l.Rate < 0 || l.Rate > maxLimitValue:
			return bad("Rate outside 0..1000000")
		case l.Rate > 0 && (l.Per < time.Millisecond || l.Per > 24*time.Hour):
			return bad("Rate needs a Per of 1ms..24h")
		case l.Rate == 0 && l.Per != 0:
			return bad("Per without Rate")
		case l.MaxRunning == 0 && l.Rate == 0:
			return bad("neither MaxRunning nor Rate set")
		case l.Per%time.Microsecond != 0:
			return bad("Per must be a whole number of microseconds")
		}
		s := scope{l.Kind, l.PerKey}
		if seen[s] {
			return fmt.Errorf("%w: %w: queue %q: kind %q per-key %v listed twice", ErrInvalidConfig, ErrDuplicateLimit, queue, l.Kind, l.PerKey)
		}
		seen[s] = true
	}
	return nil
}

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
	// grantable: every limit is a concurrency limit without PerKey and without Rate, so far
	// from them the queue can claim against grants (ClaimGranted).
	grantable bool
	// permits: the queue claims under per-worker permits (permits.go) and never takes the
	// counted paths below.
	permits bool
}

func newLimitArgs(ls []Limit) *limitArgs {
	if len(ls) == 0 {
		return nil
	}
	a := &limitArgs{concurrencyLimited: map[string]bool{}, grantable: true}
	for i, l := range ls {
		if l.PerKey || l.Rate > 0 || l.MaxRunning == 0 {
			a.grantable = false
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

// grantMin is the smallest budget an exclusive claim grants a stripe (below it the queue stays
// exclusive): a grant is worth it only if it lasts a few full batches (MaxClaimBatch defaults to
// 100), since the claim that finds it spent costs a second, exclusive, statement. A limit needs
// a room of limitStripes·grantMin = 1,000 after the batch to be granted.
const grantMin = 250

// countedMode is the claim mode of a queue with limits that permits do not serve
// (claimmode.go). Its state, owned by the queue loop, only chooses the next claim's statement
// (every statement keeps the limits on its own): far, the last limited claim saw every group
// far from its limits (the next may be striped, or a grant claim); granting, the queue's
// latest exclusive claim granted budgets (or a grant claim left its stripe's budget for
// another batch), so a claim that is not exclusive is a grant claim rather than a striped one.
type countedMode struct {
	far, granting bool
}

// plan chooses the claim (loop): exclusive unless the last claim was far from every limit;
// then a grant claim while the queue is granting, else striped on the claimer's stripe.
func (m *countedMode) plan(q *queue, p *claimPlan) {
	p.exclusive = !m.far
	p.grant = q.limits.grantable && !p.exclusive && !p.ranked && m.granting
}

// learn records what the claim saw (loop): whether the next may be far, and whether the queue
// is granting (set even when a grant claim's exclusive follow-up failed: the grant was spent).
func (m *countedMode) learn(_ *queue, r *claimResult) {
	if r.fb.setGranting {
		m.granting = r.fb.granting
	}
	if r.err == nil {
		m.far = r.fb.far
	}
}

// run runs a limited claim (claim goroutine): a grant claim (ClaimGranted) for a grantable
// queue far from its limits, else ClaimLimitsLock (+ ClaimGrantsLock when exclusive) then
// ClaimLimited in one pipeline.
func (m *countedMode) run(ctx context.Context, q *queue, p *claimPlan) ([]claimRow, claimFeedback, error) {
	rows, res, err := q.claimCounted(ctx, p, orderedParams(q, p))
	return rows, res.feedback(), err
}

func (q *queue) claimCounted(ctx context.Context, p *claimPlan, base gen.ClaimOrderedParams) ([]claimRow, limitResult, error) {
	la := q.limits
	if p.grant {
		rows, res, err := q.claimGranted(ctx, p, base)
		if err != nil || len(rows) == p.n || res.budgetLeft > 0 {
			return rows, res, err // claimed in full, or the queue ran out of jobs before the grant did
		}
		// The stripe's budget is spent (or was voided, or a pause blocks a group): the claim
		// came back short for lack of a grant, not of jobs. Claim the rest exclusively now (it
		// recounts and regrants) rather than report a short claim the loop would wait after.
		ex := *p
		ex.exclusive, ex.grant, ex.n = true, false, p.n-len(rows)
		base.Batch = int32(ex.n)
		more, res, err := q.claimCounted(ctx, &ex, base)
		if err != nil {
			res = limitResult{grantable: true, n: int32(p.n), setGranting: true} // granting: false
			if len(rows) > 0 {
				// The grant claim committed: its jobs are ours whatever the second claim did.
				return rows, res, nil
			}
		}
		return append(rows, more...), res, err
	}
	var segLimit, segRank, segQuota []int32
	if p.ranked { // quotas, deadline: ClaimSegments' candidates and order (each segment its own LIMIT)
		for _, s := range p.segs {
			segLimit, segRank, segQuota = append(segLimit, int32(s.limit)), append(segRank, int32(s.rank)), append(segQuota, int32(s.quota))
		}
	}
	first, last := q.w.sch.LimitsClass(), q.w.sch.LimitsClass()+limitStripes-1
	reserve, groupCap := int32(0), int32(noCap)
	scan := min(p.n*limitScanFactor, 10000)
	if !p.exclusive {
		scan = p.n // far from every limit: nothing is expected to be held back
		first = q.w.sch.LimitsClass() + int32(p.stripe%limitStripes)
		last, reserve, groupCap = first, stripeReserve, stripeGroupCap
	}
	if p.ranked {
		scan = 0 // every segment's candidates (each segment has its own LIMIT)
		for _, l := range segLimit {
			scan += int(l)
		}
	}
	db := &afterLock{pool: q.w.eng, sch: q.w.sch, locks: []lockedStatement{lockStatement(ctx, q.name, first, last)}}
	if p.exclusive {
		// Hold the grant rows too, so no grant claim spends while this one recounts and
		// regrants (and its snapshot sees every grant claim that spent before).
		db.locks = append(db.locks, grantsLockStatement(ctx, q.name))
	}
	got, err := gen.New(db).ClaimLimited(ctx, gen.ClaimLimitedParams{Reserve: reserve, GroupCap: groupCap,
		WorkerID: base.WorkerID, Queue: base.Queue, Batch: base.Batch, Scan: int32(scan),
		SegPriority: base.SegPriority, SegAfterUs: base.SegAfterUs, SegMinAgeUs: base.SegMinAgeUs, SegMaxAgeUs: base.SegMaxAgeUs,
		Kinds: base.Kinds, KindVersions: base.KindVersions, KindLeaseMs: base.KindLeaseMs,
		LimID: la.id, LimKind: la.kind, LimPerKey: la.perKey, LimMaxRunning: la.maxRunning, LimRate: la.rate, LimPeriodUs: la.periodUs,
		Ranked: p.ranked, SegLimit: segLimit, SegRank: segRank, SegQuota: segQuota,
		Exclusive: p.exclusive, MayGrant: la.grantable && !p.ranked, LastStripe: limitStripes - 1,
		GrantRoom: limitStripes * grantMin, RecountBelow: base.Batch + limitStripes*grantMin,
	})
	if err != nil {
		return nil, limitResult{}, err
	}
	rows, feedback := ownedRows(got)
	var f limitedFeedback
	if err := decodeFeedback(feedback, &f); err != nil {
		return nil, limitResult{}, err
	}
	res := limitResult{grantable: la.grantable, exclusive: p.exclusive, n: int32(p.n),
		binding: f.Binding, skipped: f.Binding, minRoom: f.MinRoom, granted: f.Granted}
	if la.grantable && p.exclusive {
		res.setGranting = true
	}
	return rows, res, nil
}

// limitedFeedback is ClaimLimited's feedback (its comment in db/queries.sql).
type limitedFeedback struct {
	Binding bool  `json:"binding"`
	MinRoom int32 `json:"min_room"`
	Granted int32 `json:"granted"`
}

// grantedFeedback is ClaimGranted's feedback: the smallest budget left (0 if a spend failed).
type grantedFeedback struct {
	BudgetLeft int32 `json:"budget_left"`
}

// claimGranted runs a grant claim: ClaimOrdered within the stripe's grant, one statement, no
// lock, no count, rows not marked.
func (q *queue) claimGranted(ctx context.Context, p *claimPlan, base gen.ClaimOrderedParams) ([]claimRow, limitResult, error) {
	la := q.limits
	got, err := q.w.q.ClaimGranted(ctx, gen.ClaimGrantedParams{LimKind: la.kind, LimMaxRunning: la.maxRunning,
		Queue: base.Queue, Stripe: int16((p.stripe + workerStripe(q.w.cfg.ID)) % limitStripes), Batch: base.Batch,
		SegPriority: base.SegPriority, SegAfterUs: base.SegAfterUs, SegMinAgeUs: base.SegMinAgeUs, SegMaxAgeUs: base.SegMaxAgeUs,
		KindVersions: base.KindVersions, Kinds: base.Kinds, WorkerID: base.WorkerID, KindLeaseMs: base.KindLeaseMs})
	if err != nil {
		return nil, limitResult{}, err
	}
	rows, feedback := ownedRows(got)
	var f grantedFeedback
	if err := decodeFeedback(feedback, &f); err != nil {
		return nil, limitResult{}, err
	}
	return rows, limitResult{grantable: true, granting: true, n: int32(p.n), budgetLeft: f.BudgetLeft}, nil
}

// workerStripe spreads the workers' grant claims over the stripes: claimer i of a worker claims
// on stripe (i + workerStripe(ID)) mod limitStripes, so the first claimers of different workers
// do not all queue for the same grant row.
func workerStripe(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % limitStripes)
}

// limitResult is what a limited claim reports besides its rows.
type limitResult struct {
	binding     bool  // a limit held something back
	skipped     bool  // what it held back may lie before what it claimed (watermarks stay)
	setGranting bool  // the claim decides whether the queue is granting: granted >= grantMin
	minRoom     int32 // the smallest counted room less the batch
	granted     int32 // an exclusive claim of a grantable queue: the smallest budget it granted a stripe
	budgetLeft  int32 // a grant claim: the smallest budget left on its stripe
	grantable   bool  // the queue may claim against grants when far
	granting    bool  // this was a grant claim
	exclusive   bool
	n           int32 // the batch asked for
}

// feedback is the counted claim's feedback to the loop (countedMode.learn).
func (r limitResult) feedback() claimFeedback {
	return claimFeedback{binding: r.binding, skipped: r.skipped, far: r.far(),
		setGranting: r.setGranting, granting: r.granted >= grantMin}
}

// far reports whether the queue's next limited claim may be one that is not exclusive: a grant
// claim if the queue is granting, else a striped one.
func (r limitResult) far() bool {
	switch {
	case r.granting:
		return r.budgetLeft >= r.n
	case r.grantable && r.exclusive && r.granted >= grantMin:
		return true
	}
	return !r.binding && r.minRoom >= stripeFarRoom
}

func deref0[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

// lockedStatement is a statement the generated code would run, captured instead.
type lockedStatement struct {
	sql  string
	args []any
}

// lockStatement captures ClaimLimitsLock's text and arguments from the generated code, so the
// statement stays in db/queries.sql.
func lockStatement(ctx context.Context, queue string, first, last int32) lockedStatement {
	var c capture
	_ = gen.New(&c).ClaimLimitsLock(ctx, gen.ClaimLimitsLockParams{Queue: queue, FirstClass: first, LastClass: last})
	return lockedStatement{c.sql, c.args}
}

// grantsLockStatement captures ClaimGrantsLock the same way.
func grantsLockStatement(ctx context.Context, queue string) lockedStatement {
	var c capture
	_ = gen.New(&c).ClaimGrantsLock(ctx, queue)
	return lockedStatement{c.sql, c.args}
}

// capture is a gen.DBTX that records the one statement it is given (Exec or Query).
type capture struct {
	sql  string
	args []any
}

func (c *capture) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.CommandTag{}, nil
}
func (c *capture) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errCaptured
}

// errCaptured is what a captured query returns to the generated code (which then returns it).
var errCaptured = errors.New("tenure: statement captured, not run")

func (c *capture) QueryRow(context.Context, string, ...any) pgx.Row { return nil }

// batcher is what afterLock needs of a pool.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// afterLock is a gen.DBTX whose Query sends the lock statement and the query in one batch:
// one round trip, one implicit transaction (pgx sends a single Sync), the query's snapshot
// taken after the lock was granted. The returned rows end the batch (commit) when they are
// exhausted, and report a failed commit as their error.
type afterLock struct {
	pool batcher
	// sch is the worker's schema: every statement of the batch (the captured ones and the
	// query) is rewritten for it, as sch.Wrap would.
	sch   *dbschema.Schema
	locks []lockedStatement // sent in order before the query
	// pre, if set, is a statement sent after the locks and before the query (same transaction)
	// whose rows preRows reads.
	pre     *lockedStatement
	preRows func(pgx.Rows) error
}

func (a *afterLock) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("tenure: afterLock supports Query only")
}
func (a *afterLock) QueryRow(context.Context, string, ...any) pgx.Row { return nil }

func (a *afterLock) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	for _, l := range a.locks {
		b.Queue(a.sch.Rewrite(l.sql), l.args...)
	}
	if a.pre != nil {
		b.Queue(a.sch.Rewrite(a.pre.sql), a.pre.args...)
	}
	b.Queue(a.sch.Rewrite(sql), args...)
	br := a.pool.SendBatch(ctx, b)
	for range a.locks {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	if a.pre != nil {
		rows, err := br.Query()
		if err == nil {
			err = a.preRows(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows closes the batch (the implicit transaction's commit) when the rows end.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// flowBlock pauses the groups of e's job covered by limits with RetryAfterPauses for d (a
// handler returned RetryAfter). It runs on the handler goroutine before the failure is
// reported; an error is logged, not fatal (the job's own retry still waits d).
func (w *Worker) flowBlock(e *execution, d time.Duration) {
	q := e.q
	if q == nil || d <= 0 {
		return
	}
	var kinds, keys []string
	key := e.c.Metadata[ConcurrencyKeyMetadata]
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
	ctx, cancel := context.WithTimeout(w.engCtx, finishTimeout)
	defer cancel()
	if err := w.q.FlowBlock(ctx, gen.FlowBlockParams{Queue: q.name, DelayUs: d.Microseconds(), Kinds: kinds, GroupKeys: keys}); err != nil {
		w.log.Warn("tenure: could not pause the job's limit groups after RetryAfter", "job_id", e.c.ID, "kind", e.c.Kind, "err", err)
		return
	}
	w.m.flowBlocks.Add(1)
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
func (w *Worker) maybePruneFlow(ctx context.Context, fp *flowPruner) {
	now := w.clk.Now()
	if now.Before(fp.next) {
		return
	}
	fp.next = now.Add(w.cfg.PruneEvery)
	pctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	if _, err := w.pruneFlow(pctx, fp); err != nil && ctx.Err() == nil {
		w.m.pruneErrors.Add(1)
		w.engineError(&w.pruneLog, "flow prune", err)
	}
}

// PruneFlow runs one bounded pass of the tenure.flow prune over the worker's queues (from the
// start of each) and returns the rows it deleted. The worker runs it every PruneEvery; it is
// exported for operators and tests.
func (w *Worker) PruneFlow(ctx context.Context) (int, error) {
	if w.q == nil {
		return 0, errors.New("tenure: PruneFlow on a worker whose engine has not started")
	}
	return w.pruneFlow(ctx, &flowPruner{})
}

func (w *Worker) pruneFlow(ctx context.Context, fp *flowPruner) (int, error) {
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
