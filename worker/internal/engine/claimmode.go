package engine

import (
	"context"

	"github.com/tenureq/tenure/db/gen"
)

// This file is the one interface every claim mode implements (docs/design.md, "The claim
// path"). A queue has exactly one mode, chosen at New from its configuration (newClaimMode).
// Four claim transactions, each one Go function (run) over the same statements whatever its
// arguments decide:
//
//	mode      configuration                        transaction (db/queries.sql)             arguments
//	ordered   no limits, no fair share             [CompleteMany]+ClaimOrdered              ranked (quotas, deadline):
//	                                               (ClaimOrderedMany: the batcher's,        read every segment's limit
//	                                               claimbatch.go, for many queues)          and rank; else stop at batch
//	fair      Fairness.FairShare                   [CompleteMany]+ClaimFair                 cursors, tenant watermarks
//	counted   a PerKey or Rate limit, or a         ClaimLimitsLock+[CompleteMany]+          lock scope: every stripe
//	          ranked fairness with limits          ClaimLimited (limits.go)                 (exclusive) or one (striped)
//	permit    every limit a concurrency limit      PermitLock | ClaimLimitsLock+            lock scope and allocation:
//	          without PerKey/Rate, fairness not    PermitAllocateLock+PermitAllocate;       own rows, or every stripe and
//	          ranked (usesPermits)                 [CompleteMany]+ClaimPermitted            row + PermitAllocate
//	                                               (permits.go)
//
// Until issue 28 there were seven: the ranked claim had its own statement (ClaimSegments, now
// ClaimOrdered with limits), and an allocation its own transaction before the permit claim
// (now its first statements, same pipeline and commit). The exclusive and striped claims were
// already one function over the same statements, their lock scope an argument.
//
// [CompleteMany]: the queue's successes waiting for a claim (claimPlan.done), completed first in
// the claim's pipeline and transaction, when there are any (claim.go, "Completions ride on
// claims"); the mode reports which landed (claimFeedback.doneLanded).
//
// Every transaction feeds the ids it chose to the one ownership statement (tenure.own) and
// returns the one claim row shape (claimRow), converted once (fromClaimRow).
//
// A claim is three steps, and the mode's state belongs to the queue loop alone:
//   - plan, on the loop: the loop fills what every claim needs (batch, segments, watermarks),
//     then the mode adds what its state decides (the fair cursors and tenant watermarks, which
//     limited claim to run, the permit share this worker believes it holds). The plan is a
//     value: the claim goroutine gets its own copy.
//   - run, on a claim goroutine: the statements, reading only the plan and the queue's fixed
//     configuration (name, limits arguments, the worker's pools and kinds). It returns the owned
//     rows and a feedback value, never writes queue or mode state.
//   - learn, on the loop, when the result comes back over claimedCh, failed or not: the mode
//     folds the feedback into its state. Then the loop starts the handlers of the rows (so no
//     handler result can reach the loop before the loop knows its job).
//
// So no atomic and no mutex guards mode state: claims of one queue in flight at once each
// plan from the state the loop had when they started and their feedback is applied in the
// order they return. The modes' state is a hint for speed only (which statement to run next):
// the limits themselves are kept inside the statements, whatever the hint said (the proofs are
// in limits.go and permits.go).
type claimMode interface {
	// plan adds the mode's decisions to p (loop).
	plan(q *queue, p *claimPlan)
	// run runs the planned claim (claim goroutine). Rows that committed are returned with a
	// nil error, whatever failed after them (the loop must own them: rows returned with an
	// error are dropped); an error means the claim owns nothing. fb is read even when err is
	// not nil (learn decides what a failed claim teaches).
	run(ctx context.Context, q *queue, p *claimPlan) (rows []claimRow, fb claimFeedback, err error)
	// learn folds what the claim returned (its plan, rows, feedback, error) into the mode's
	// state (loop).
	learn(q *queue, r *claimResult)
}

// claimFeedback is what a claim learnt besides its rows (one struct for every mode; each sets
// its own fields).
type claimFeedback struct {
	// binding: a limit held jobs back (limits.go, permits.go): the claimers back off until a
	// limited job settles. skipped: the jobs held back may lie before ones claimed, so the
	// watermarks must not move.
	binding, skipped bool

	// counted (limits.go): far reports that the next limited claim need not be exclusive.
	far bool

	// Every mode: doneLanded, for the completions the claim carried (claimPlan.done), whether
	// each landed (true) or was skipped because another session held its row (false); a
	// completion missing from it was stale; nil when the claim failed (claim.go, "Completions
	// ride on claims").
	doneLanded rideLanded

	// permit (permits.go): alloc is the last allocation that committed (nil: none ran);
	// lostPermit, that the claim found no permit row for some limit.
	alloc      *permitAlloc
	lostPermit bool

	// fair (fairshare.go): per band, the tenant the next claim starts after (where fairMoved)
	// and how far the keyless jobs were read.
	fairNext    bandKeys
	fairMoved   [MaxPriority + 1]bool
	keylessUpto bandTimes
}

// newClaimMode returns the mode for a queue's configuration (the table above).
func newClaimMode(q *queue) claimMode {
	switch {
	case q.pol.F.FairShare:
		return &fairMode{} // New refuses fair share with limits (ErrFairShareWithLimits)
	case q.limits != nil && q.limits.permits:
		return &permitMode{}
	case q.limits != nil:
		return &countedMode{}
	}
	return orderedMode{}
}

// orderedMode is the claim of a queue without limits or fair share: the fairness policy's
// segments in serving order, one statement for every policy (ClaimOrdered, or ClaimOrderedMany
// through the batcher when the worker serves several queues and the policy does not rank).
// Strict priority and aging read the segments in order and stop when the batch is full;
// quotas and a deadline read every segment up to its limit and let the statement rank them
// (orderedParams). It has no state of its own: the watermarks and the quota credits are the
// loop's (claim.go, internal/engine/fairness.go), for every mode.
type orderedMode struct{}

func (orderedMode) plan(*queue, *claimPlan)    {}
func (orderedMode) learn(*queue, *claimResult) {}

func (orderedMode) run(ctx context.Context, q *queue, p *claimPlan) ([]claimRow, claimFeedback, error) {
	// A plan that goes through the batcher (useClaimBatch) never reaches here: the loop hands
	// it to the batcher itself (startBatched).
	db, landed := q.claimDB(ctx, p.done)
	got, err := db.ClaimOrdered(ctx, orderedParams(q, p, p.n))
	if err != nil {
		return nil, claimFeedback{}, err
	}
	rows, _ := OwnedRows(got)
	return rows, claimFeedback{doneLanded: landed}, nil
}

// orderedParams are the arguments every claim but the fair one shares (ClaimOrdered's; the
// limited and permit claims take theirs from it): the worker, the queue, the batch, the
// segments in serving order with their watermarks, limits, ranks and quotas, and the kinds the
// worker runs. An ordered plan (strict, aging) reads up to scan candidates in serving order:
// every segment's limit and quota are scan, so the statement's ranking keeps the read order
// and its loop stops at scan (nothing locked beyond it). A ranked plan (quotas, a deadline)
// reads every segment up to its own limit (scan = their sum) for the statement to rank.
func orderedParams(q *queue, p *claimPlan, scan int) gen.ClaimOrderedParams {
	w := q.w
	k := &w.kinds
	arg := gen.ClaimOrderedParams{WorkerID: w.cfg.ID, Queue: q.name, Batch: int32(p.n),
		Kinds: k.names, KindVersions: k.versions, KindLeaseMs: k.leaseMs}
	total := 0
	for _, s := range p.segs {
		arg.SegPriority = append(arg.SegPriority, int16(s.Priority))
		arg.SegAfterUs = append(arg.SegAfterUs, p.after[s.Priority])
		arg.SegMinAgeUs = append(arg.SegMinAgeUs, s.MinAge.Microseconds())
		arg.SegMaxAgeUs = append(arg.SegMaxAgeUs, maxAgeUs(s.MaxAge))
		arg.SegRank = append(arg.SegRank, int32(s.Rank))
		lim, quota := scan, scan
		if p.ranked {
			lim, quota = s.Limit, s.Quota
		}
		arg.SegLimit = append(arg.SegLimit, int32(lim))
		arg.SegQuota = append(arg.SegQuota, int32(quota))
		total += lim
	}
	arg.Scan = int32(scan)
	if p.ranked {
		arg.Scan = int32(total)
	}
	return arg
}
