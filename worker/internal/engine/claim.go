package engine

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/logkey"
)

// This file is the claim path: the single-statement claim (docs/contract.md, "Ownership is
// state"), committed (autocommit) before any handler starts, for as many jobs as the queue has
// free handler slots (bounded by MaxClaimBatch). The queue loop (queue.go) decides when to
// claim and how much: it plans the claim (watermarks, fairness segments) on its own goroutine,
// runs the statement on a claim goroutine (or, for a plain ordered claim on a worker serving
// several queues, hands it to the claim batcher: claimbatch.go), and records the result when
// it comes back.
//
// Claiming is demand-driven: while the queue yields work it claims again as soon as a slot
// frees, so throughput is bounded by the handlers, not by a timer. A claim that returns no row
// backs off with jitter (FetchPollMin doubling to FetchPollMax); a NOTIFY from an insert wakes
// it at once. Polling stays the authority, so a lost notification only costs latency.

// claimed is one claimed attempt: the row the claim statement returned, converted once
// (fromClaimRow), which the handler (generics.Job embeds it), middleware and the Outcome see,
// and its claim token, which fences every write the engine makes about the attempt.
type claimed struct {
	*generics.JobRow
	token uuid.UUID
}

// logAttrs are the attributes of every log record about this attempt (job_id, kind, queue,
// attempt, generation: docs/operations.md, "Logs"), followed by more.
func (c *claimed) logAttrs(more ...any) []any {
	return append([]any{logkey.JobID, c.ID, logkey.Kind, c.Kind, logkey.Queue, c.Queue,
		logkey.Attempt, c.Attempt, logkey.Generation, c.Generation}, more...)
}

// claimPlan is what the loop decides before a claim: the statement's arguments. The loop
// fills the part every mode shares (startClaim), the queue's mode its own (claimMode.plan);
// the claim goroutine only reads it.
type claimPlan struct {
	n      int
	ranked bool // the policy ranks its segments together (quotas, deadline): ClaimOrdered reads every segment's limit
	segs   []Segment
	quota  BandCounts
	after  bandTimes
	// full: the watermarks were reset for this claim (it reads every band from its start);
	// prev holds the watermarks it replaced.
	full bool
	prev bandTimes
	// Limited claims: exclusive means near a limit (a counted claim holding every stripe, or a
	// permit claim): its limited jobs' finishes free room, so they do not linger. A counted
	// claim that is not exclusive is striped on stripe (limits.go).
	exclusive bool
	stripe    int
	// permit claims (permits.go): what the loop knows of this worker's share.
	permit permitView
	// done: the successes the claim completes first, in its transaction ("Completions ride on
	// claims", below); every mode carries them.
	done []*Execution
	// fair-share claims (fairshare.go): each band's cursor and, with fairWatermarks, the
	// tenants' watermarks (after holds the keyless jobs').
	fair           bool
	fairWatermarks bool
	fairCursor     bandKeys
	known          []tenantKey
	knownAfter     []int64
}

// startClaim plans a claim of n jobs on the loop and runs its statement on a claim goroutine,
// which reports to the loop (a batched claim: the batcher's statement reports, startBatched). The statement is not cut off when Stop begins (a claim that
// commits must be dispatched, or its jobs would be stranded until their lease expired); it is
// bounded by claimTimeout and by the engine context (Stop's deadline).
func (q *queue) startClaim(ctx context.Context, idx, n int) {
	// Every policy, strict priority included, claims through per-band segments: each band is
	// an equality on priority, so run_at bounds the index range. A single strict scan (the
	// ClaimStrict statement) cannot bound run_at across bands and walks every future-dated
	// entry of the higher bands (retries in backoff, scheduled jobs) before reaching what is
	// due: TestClaimSkipsFutureJobsOfHigherBands.
	p := claimPlan{n: n, stripe: idx}
	p.after, p.full, p.prev = q.watermarks()
	p.segs, p.quota, p.ranked = q.pol.Plan(n)
	q.mode.plan(q, &p)
	p.done = q.takeRide()
	if q.useClaimBatch(&p) {
		// One statement for the plain ordered claims of many queues (claimbatch.go): no claim
		// goroutine, the batcher's statement answers the loop.
		q.startBatched(ctx, idx, p)
		return
	}
	mode := q.mode
	q.runClaim(func() {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, q.w.claimDeadline())
		var rows []claimRow
		var fb claimFeedback
		err := q.w.retryStale(func() (err error) {
			rows, fb, err = mode.run(cctx, q, &p)
			return err
		})
		cancel()
		r := claimResult{idx: idx, n: n, plan: p, fb: fb, err: err, took: time.Since(start)}
		if err == nil {
			r.got = make([]claimed, len(rows))
			for i := range rows {
				r.got[i] = fromClaimRow(rows[i], q.w.cfg.ID)
			}
		}
		select {
		case q.claimedCh <- r:
		case <-q.done:
		}
	})
}

// runClaim runs fn, a claim's statement and its report to the loop, on an idle claim goroutine
// of the queue if one waits, else on a new one (loop). A claim goroutine that reported waits
// for the queue's next claim until the loop returns (awaitNext), as handler goroutines do
// (execute.go, dispatch): a new goroutine per claim grew its stack from the minimum to what
// pgx's statement path needs on every claim, copying it each time, on the claim's critical path
// (~6 % of the batch burn-down's Go CPU: runtime.newstack under pgx's statement cache lookup).
// The goroutines are never more than the claims in flight at once (Claimers).
func (q *queue) runClaim(fn func()) {
	select {
	case q.claimRunCh <- fn:
	default:
		q.w.spawn(func() {
			for fn != nil {
				fn()
				fn = awaitNext(q, q.claimRunCh)
			}
		})
	}
}

// Completions ride on claims. A job's claim and its completion each cost a transaction (a round
// trip, a commit, a WAL flush). So the successes of a queue's jobs wait, on the loop (q.ride),
// for the queue's next claim, which completes them first, in its own transaction: the
// CompleteMany the finishers would have sent (completeMany, fenced by id and claim token as
// always) goes in the same pipeline as the claim statement, before it, and both commit at its
// one Sync (AfterLock; for the batched claims, the batch's CompleteMany carries every request's
// completions). The claim's snapshot sees the rows it completed as finished (a limited claim
// counts the room they freed).
//
// The loop owns which completions ride: a success (not already completed by CompleteTx) joins
// q.ride when its handler returns, the next claim the loop starts takes them all (up to
// MaxFinishBatch), and what no claim took goes to the finishers as before
//   - at once when no claim of the queue is in flight (an idle queue: its claimers sleep, and
//     the finishers' FinishLinger batches the completions as before), or the queue stops or is
//     paused;
//   - FinishLinger after the oldest joined while claims are in flight (a claim in flight takes
//     none, and the next claim starts only when one returns): the finishers then write them
//     without lingering again (execution.lingered).
// So no completion waits longer than FinishLinger for a claim, and under load, when claims
// follow each other, completions cost no transaction of their own.
//
// When the claim returns, the loop settles what it completed exactly as a finisher's write
// would (settle: outcome, metrics, logs; the release of dependents is the statement's own, the
// done signal and the dependents' signals follow the commit, engine/donenotify.go): landed rows succeeded, rows it skipped because another session held them
// (busy) go to the finishers, which wait for that row alone, and rows it did not change are
// stale. A claim that failed rolled its completions back with it, unless its commit went
// through and only the reply was lost: they go to the finishers, marked rideFailed, so that a
// write of theirs that changes nothing reads the row back (readBack) before calling it stale.

// rideOn makes db's query complete done first, in its pipeline and transaction (claim
// goroutine). It returns the map that the query, once run, holds the result in: per completion,
// true when it landed, false when another session held its row (busy, not written); a
// completion missing from the map was not written (stale).
func rideOn(ctx context.Context, db *AfterLock, done []*Execution) rideLanded {
	if len(done) == 0 {
		return nil
	}
	sortByID(done) // every multi-row fenced write locks its rows in id order
	var cm Capture
	_, _ = completeMany(ctx, gen.New(&cm), done)
	landed := make(rideLanded, len(done))
	db.Pre = append(db.Pre, PreStatement{LockedStatement{SQL: cm.SQL, Args: cm.Args}, func(rows pgx.Rows) error {
		var id int64 // declared once: scan targets escape, one allocation per call, not per row
		var busy, deleted, settles bool
		for rows.Next() {
			if err := rows.Scan(&id, &busy, &deleted, &settles); err != nil {
				return err
			}
			landed[id] = rideRow{landed: !busy, deleted: deleted, settles: settles}
		}
		return nil
	}})
	return landed
}

// rideLanded is what the completions riding on a claim became, by job id (rideOn): a
// completion missing from it was not written (stale).
type rideLanded map[int64]rideRow

// rideRow is one riding completion's result: landed (false: another session held the row, not
// written), deleted (landed by deleting the row: delete on success), and settles (the row has
// dependents: their signals follow the commit, DoneID.Settles).
type rideRow struct{ landed, deleted, settles bool }

// claimDB is what a claim's statements run on: the engine's queries, or, when the claim carries
// completions, a pipeline that sends CompleteMany before the claim, in its transaction
// (rideOn). landed is rideOn's.
func (q *queue) claimDB(ctx context.Context, done []*Execution) (db *gen.Queries, landed rideLanded) {
	if len(done) == 0 {
		return q.w.q, nil
	}
	a := &AfterLock{Pool: q.w.eng, Sch: q.w.sch}
	return gen.New(a), rideOn(ctx, a, done)
}

// recordClaim moves the watermarks and the fairness state, and counts the claim (loop).
func (q *queue) recordClaim(r claimResult) {
	w := q.w
	if !r.plan.ranked && !r.plan.fair && !r.fb.skipped {
		// Only exact claims move watermarks: a ranked claim locks more candidates than it
		// claims, and a concurrent claimer that skipped those (locked, but then left ready)
		// must not be allowed to jump past them. Nor does a limited claim a limit held back
		// (limits.go): the jobs it skipped may lie before the ones it claimed. A fair claim
		// (fairshare.go) serves tenants, not the band's oldest jobs: its mode moves its cursors
		// and watermarks (fairMode.learn).
		q.advance(r.got)
	}
	if r.plan.full {
		w.m.FullClaims.Add(1)
		q.fullClaimed(r.plan, r.got)
	}
	var perBand BandCounts
	for i := range r.got {
		if p := r.got[i].Priority; p >= MinPriority && p <= MaxPriority {
			perBand[p]++
		}
	}
	q.pol.Observe(r.n, r.plan.quota, &perBand)

	w.m.Claims.Add(1)
	w.m.ClaimAsked.Add(int64(r.n))
	w.m.Claimed.Add(int64(len(r.got)))
	w.m.ClaimLatency.Record(r.took)
	for i := range r.got {
		w.m.recordWait(r.got[i].Queue, r.got[i].Priority, deref(r.got[i].AttemptedAt).Sub(r.got[i].RunAt))
	}
}

// Watermarks. Claims take each band's jobs oldest first, so once a claim took a band's job
// due at T, every ready job of that band due before T was claimed too (or was locked by
// another claimer at that instant). The next claims then start the band's index range at T:
// the index entries left behind by claimed rows (dead versions only VACUUM removes, and which
// pile up at the front of the range, faster still while a long transaction or a report query
// holds back the xmin horizon) are never walked again, so a claim's cost does not grow with
// them (TestClaimCostFlatWhileHorizonHeld).
//
// A job can still become ready behind a watermark: inserted by a transaction that started
// before the claim and committed after it, enqueued with an explicit RunAt in the past, or
// left ready by a claimer whose claim rolled back. Full claims find those: a claim that
// resets the watermarks and reads every band from its start, and so walks the dead entries
// once. They run
//   - when a NOTIFY without a due-time hint announced a due job and the watermark claim that
//     followed found nothing (at most once per watermarkReset): the notified job may be behind
//     the watermark (a hinted NOTIFY lowers the band's watermark to its due time instead:
//     dueHint);
//   - after the listener reconnects (notifications may have been lost);
//   - periodically as the backstop for everything no notification announces: every
//     watermarkReset at first, doubling up to watermarkResetMax while full claims find
//     nothing behind the old watermarks, back to watermarkReset as soon as one does.
//
// So while nothing lands behind the watermarks, the walk over dead entries happens once per
// watermarkResetMax instead of once per claim.
const (
	watermarkReset    = time.Second
	watermarkResetMax = 16 * time.Second
)

type bandTimes [MaxPriority + 1]int64 // unix microseconds per band; 0 = from the start

// watermarks returns the bands' lower bounds for the next claim, and whether that claim is
// a full one (with the watermarks it replaces) (loop only).
func (q *queue) watermarks() (after bandTimes, full bool, prev bandTimes) {
	if q.wmEvery == 0 {
		q.wmEvery = watermarkReset
	}
	if q.wmForce || time.Since(q.wmSince) >= q.wmEvery {
		for b := range q.dueHint {
			q.dueHint[b].Store(0)
		}
		prev = q.wm
		q.wm, q.wmSince, q.wmForce = bandTimes{}, time.Now(), false
		q.plainNotified.Store(false)
		return q.wm, true, prev
	}
	for b := range q.dueHint {
		h := q.dueHint[b].Swap(0)
		if h == 0 {
			continue
		}
		if h < q.wm[b] {
			q.wm[b] = h // a job committed behind the watermark: start the band there
			q.w.m.WatermarkHints.Add(1)
		}
		if fm, ok := q.mode.(*fairMode); ok {
			fm.hint(b, h)
		}
	}
	return q.wm, false, prev
}

// hintDue records that a job of band prio due at runAtUs was just committed (listener).
func (q *queue) hintDue(prio int, runAtUs int64) {
	q.skip.Hinted(prio, q.w.clk.Now()) // the batched claims probe the band again (claimbatch.go)
	h := &q.dueHint[prio]
	for {
		cur := h.Load()
		if cur != 0 && cur <= runAtUs {
			return
		}
		if h.CompareAndSwap(cur, runAtUs) {
			return
		}
	}
}

// advance moves each band's watermark to the newest due time it just claimed (loop only).
func (q *queue) advance(got []claimed) {
	for i := range got {
		p, t := got[i].Priority, got[i].RunAt.UnixMicro()
		if p >= MinPriority && p <= MaxPriority && t > q.wm[p] {
			q.wm[p] = t
		}
	}
}

// fullClaimed adapts the backstop's period to what a full claim found: a job due before the
// watermark it replaced had been missed by the watermark claims (loop only).
func (q *queue) fullClaimed(p claimPlan, got []claimed) {
	for i := range got {
		b := got[i].Priority
		if b >= MinPriority && b <= MaxPriority && got[i].RunAt.UnixMicro() < p.prev[b] {
			q.w.m.ClaimedBehindWatermark.Add(1)
			q.wmEvery = watermarkReset
			return
		}
	}
	q.wmEvery = min(2*q.wmEvery, watermarkResetMax)
}

// behindSuspected reports whether an empty watermark claim should be followed at once by a
// full one: a NOTIFY without a due-time hint arrived since the last full claim, which is at
// least watermarkReset old.
func (q *queue) behindSuspected(p claimPlan) bool {
	return !p.full && !p.ranked && !p.fair && q.plainNotified.Load() && time.Since(q.wmSince) >= watermarkReset
}

func maxAgeUs(d time.Duration) int64 {
	if d == 0 {
		return (100 * 365 * 24 * time.Hour).Microseconds()
	}
	return d.Microseconds()
}

// claimRow is what every claim statement returns (ClaimRow).
type claimRow = ClaimRow

// fromClaimRow is the one conversion from what a claim statement returned (an owned row:
// OwnedRows) to the attempt it is run as: the row (ToJobRow) and the claim token.
func fromClaimRow(r claimRow, workerID string) claimed {
	row, token := ToJobRow(r, workerID)
	return claimed{token: token, JobRow: row}
}
