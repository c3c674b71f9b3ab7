package worker

import (
	"context"
	"errors"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/jobs"
)

// This file is fair share (docs/guide.md §20, "Fair share between tenants"): within each
// priority band of a queue with Fairness.FairShare, the tenants with ready jobs are served
// round robin, so one tenant's backlog cannot starve another's single job.
//
// A job's tenant is its fair key (jobs.InsertOpts.FairKey, stored in metadata under
// jobs.FairKeyMetadata). The claim is one statement, ClaimFair (db/queries.sql): per band it
// finds up to a batch of tenants with ready jobs by a skip scan of jobs_fair_idx
// (tenure.fair_keys: one index descent per tenant, however deep its backlog), starting after
// the band's cursor; takes each tenant's oldest jobs, a share of the batch each; ranks them by
// round (every tenant's first job, then every tenant's second, ...) and by the tenant's
// position after the cursor, within the fairness policy's ranks and quotas; and locks them in
// that order until the batch is full (only claimed rows are locked). The loop keeps one cursor
// per band: the tenant served last in the last round of the previous claim, so the next claim
// starts with the tenant after it. Over consecutive claims every tenant with ready jobs gets
// the same number of starts per round, whatever its backlog: deficit round robin with a
// quantum of one job.
//
// Jobs without a key are one more participant in every round (position 0), found among the
// band's oldest batch of ready jobs: they are served in the band's oldest-first order, never
// starved by the keyed tenants, but one keyless job behind another tenant's older backlog
// waits until that backlog's older jobs are claimed. Give every job of a fair-share queue a key.
//
// Fair claims read every band from its start (no watermarks): each tenant's range is read from
// its first ready entry, so the dead index entries of claimed jobs (until VACUUM, or while a
// long transaction holds the horizon) are walked again by each claim, as by every peer's claim.

// ErrFairShareWithLimits: a queue with Fairness.FairShare cannot have Limits yet (the limited
// claim does not serve tenants round robin). Returned by New, wrapped with ErrInvalidConfig.
var ErrFairShareWithLimits = errors.New("tenure: fair share does not combine with limits yet")

// bandKeys holds one fair key per priority band (index = priority); "" = from the first key.
type bandKeys [maxPriority + 1]string

// claimFair runs the fair claim for the plan's segments. It records in p.fairNext the cursor
// each band's next claim should start after.
func (q *queue) claimFair(ctx context.Context, p *claimPlan) ([]gen.ClaimStrictRow, error) {
	w := q.w
	k := &w.kinds
	arg := gen.ClaimFairParams{WorkerID: w.cfg.ID, Queue: q.name, Batch: int32(p.n),
		Kinds: k.names, KindVersions: k.versions, KindLeaseMs: k.leaseMs}
	for _, s := range p.segs {
		arg.SegPriority = append(arg.SegPriority, int16(s.priority))
		arg.SegMinAgeUs = append(arg.SegMinAgeUs, s.minAge.Microseconds())
		arg.SegMaxAgeUs = append(arg.SegMaxAgeUs, maxAgeUs(s.maxAge))
		arg.SegRank = append(arg.SegRank, int32(s.rank))
		arg.SegQuota = append(arg.SegQuota, int32(p.quota[s.priority]))
	}
	for b, key := range p.fairCursor {
		if key != "" {
			arg.CursorPriority = append(arg.CursorPriority, int16(b))
			arg.CursorKey = append(arg.CursorKey, key)
		}
	}
	got, err := w.q.ClaimFair(ctx, arg)
	if err != nil {
		return nil, err
	}
	// The band's last served tenant: the keyed row of the latest (round, position).
	var last [maxPriority + 1]*gen.ClaimFairRow
	rows := make([]gen.ClaimStrictRow, len(got))
	for i := range got {
		r := &got[i]
		rows[i] = gen.ClaimStrictRow{ID: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: r.Payload,
			PayloadVersion: r.PayloadVersion, Priority: r.Priority, RunAt: r.RunAt, Attempts: r.Attempts,
			MaxAttempts: r.MaxAttempts, LeaseMs: r.LeaseMs, LockedUntil: r.LockedUntil, ClaimToken: r.ClaimToken,
			Generation: r.Generation, AttemptedAt: r.AttemptedAt, CreatedAt: r.CreatedAt, Metadata: r.Metadata,
			Tags: r.Tags, Snoozes: r.Snoozes}
		b := int(r.Priority)
		if r.FairPos == 0 || b < minPriority || b > maxPriority {
			continue
		}
		if l := last[b]; l == nil || r.FairRound > l.FairRound || (r.FairRound == l.FairRound && r.FairPos > l.FairPos) {
			last[b] = r
		}
	}
	for b, r := range last {
		if r != nil {
			p.fairNext[b] = decodeMetadata(r.Metadata)[jobs.FairKeyMetadata]
			p.fairMoved[b] = true
		}
	}
	return rows, nil
}

// fairAdvance moves each band's cursor to the tenant the claim served last (loop only).
func (q *queue) fairAdvance(p claimPlan) {
	for b, moved := range p.fairMoved {
		if moved {
			q.fairCursor[b] = p.fairNext[b]
		}
	}
}
