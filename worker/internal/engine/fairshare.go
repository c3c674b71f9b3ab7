package engine

import (
	"context"

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

// bandKeys holds one fair key per priority band (index = priority); "" = from the first key.
type bandKeys [MaxPriority + 1]string

// tenantKey names a tenant's watermark: its band and fair key.
type tenantKey struct {
	band int
	key  string
}

// maxTenantWatermarks bounds the tenants a queue keeps a watermark for; past it the map is
// cleared (a tenant without a watermark is read from the start of its range, which is only
// slower).
const maxTenantWatermarks = 10000

// fairMode is the claim mode of a queue with Fairness.FairShare (claimmode.go). Its state,
// owned by the queue loop: per band the tenant served last (the next claim starts after it),
// and each tenant's watermark (unix µs).
type fairMode struct {
	cursor bandKeys
	wm     map[tenantKey]int64
}

// plan fills a fair claim's plan (loop): the cursors, and the watermarks when every band has a
// single segment. With several segments per band (aging, deadline) a tenant's jobs are claimed
// from several age windows, not oldest first, so no watermark can be kept: those claims read
// every range from its start.
func (m *fairMode) plan(_ *queue, p *claimPlan) {
	p.fair, p.fairCursor = true, m.cursor
	seen := map[int]bool{}
	p.fairWatermarks = true
	for _, s := range p.segs {
		if seen[s.Priority] {
			p.fairWatermarks = false
		}
		seen[s.Priority] = true
	}
	if p.full {
		clear(m.wm) // a full claim reads every range from its start
	}
	if !p.fairWatermarks {
		p.after = bandTimes{}
		return
	}
	p.known = make([]tenantKey, 0, len(m.wm))
	p.knownAfter = make([]int64, 0, len(m.wm))
	for k, us := range m.wm {
		p.known = append(p.known, k)
		p.knownAfter = append(p.knownAfter, us)
	}
}

// run runs the fair claim for the plan's segments (claim goroutine). Its feedback holds the
// cursor each band's next claim starts after and how far the keyless jobs were read.
func (m *fairMode) run(ctx context.Context, q *queue, p *claimPlan) ([]claimRow, claimFeedback, error) {
	var out claimFeedback
	w := q.w
	k := &w.kinds
	arg := gen.ClaimFairParams{WorkerID: w.cfg.ID, Queue: q.name, Batch: int32(p.n),
		Kinds: k.names, KindVersions: k.versions, KindLeaseMs: k.leaseMs}
	for _, s := range p.segs {
		arg.SegPriority = append(arg.SegPriority, int16(s.Priority))
		arg.SegAfterUs = append(arg.SegAfterUs, p.after[s.Priority])
		arg.SegMinAgeUs = append(arg.SegMinAgeUs, s.MinAge.Microseconds())
		arg.SegMaxAgeUs = append(arg.SegMaxAgeUs, maxAgeUs(s.MaxAge))
		arg.SegRank = append(arg.SegRank, int32(s.Rank))
		arg.SegQuota = append(arg.SegQuota, int32(p.quota[s.Priority]))
	}
	for b, key := range p.fairCursor {
		if key != "" {
			arg.CursorPriority = append(arg.CursorPriority, int16(b))
			arg.CursorKey = append(arg.CursorKey, key)
		}
	}
	for i, t := range p.known {
		arg.KnownPriority = append(arg.KnownPriority, int16(t.band))
		arg.KnownKey = append(arg.KnownKey, t.key)
		arg.KnownAfterUs = append(arg.KnownAfterUs, p.knownAfter[i])
	}
	db, landed := q.claimDB(ctx, p.done)
	got, err := db.ClaimFair(ctx, arg)
	if err != nil {
		return nil, out, err
	}
	out.doneLanded = landed
	// The feedback: per band, how far the keyless jobs were read (the statement's, on every
	// row; the one row when nothing was claimed), and per claimed row its tenant's position
	// and round. The band's last served tenant: the keyed row of the latest (round, position).
	rows, feedback := OwnedRows(got)
	var fb fairFeedback
	if err := DecodeFeedback(feedback, &fb); err != nil {
		return nil, out, err
	}
	for j, b := range fb.KeylessBand {
		if b >= MinPriority && b <= MaxPriority && j < len(fb.KeylessUptoUs) {
			out.keylessUpto[b] = fb.KeylessUptoUs[j]
		}
	}
	var last [MaxPriority + 1]*claimRow
	var lastAt [MaxPriority + 1]fairFeedback
	for i := range rows {
		r := &rows[i]
		var f fairFeedback
		if err := DecodeFeedback(r.Feedback, &f); err != nil {
			return nil, out, err
		}
		b, pos, round := int(deref0(r.Priority)), f.FairPos, f.FairRound
		if pos == 0 || b < MinPriority || b > MaxPriority {
			continue
		}
		if l := lastAt[b]; last[b] == nil || round > l.FairRound || (round == l.FairRound && pos > l.FairPos) {
			last[b], lastAt[b] = r, f
		}
	}
	for b, r := range last {
		if r != nil {
			out.fairNext[b] = DecodeMetadata(r.Metadata)[jobs.FairKeyMetadata]
			out.fairMoved[b] = true
		}
	}
	return rows, out, nil
}

// fairFeedback is ClaimFair's feedback: per band, how far the keyless jobs were read
// (keyless_band, keyless_upto_us: parallel arrays), and on each claimed row its tenant's
// rotation position (0: keyless) and round.
type fairFeedback struct {
	KeylessBand   []int16 `json:"keyless_band"`
	KeylessUptoUs []int64 `json:"keyless_upto_us"`
	FairPos       int32   `json:"fair_pos"`
	FairRound     int32   `json:"fair_round"`
}

// learn records a fair claim that succeeded (loop).
func (m *fairMode) learn(q *queue, r *claimResult) {
	if r.err == nil {
		m.advance(q, &r.plan, &r.fb, r.got)
	}
}

// advance records a fair claim (loop): each band's cursor moves to the tenant served last;
// with watermarks, each tenant's to the newest job claimed of it (a tenant's jobs are claimed
// oldest first) and the keyless jobs' (the band watermark) to how far the claim read them.
func (m *fairMode) advance(q *queue, p *claimPlan, fb *claimFeedback, got []claimed) {
	for b, moved := range fb.fairMoved {
		if moved {
			m.cursor[b] = fb.fairNext[b]
		}
	}
	if !p.fairWatermarks {
		return
	}
	for b, us := range fb.keylessUpto {
		if us > q.wm[b] {
			q.wm[b] = us
		}
	}
	if m.wm == nil {
		m.wm = map[tenantKey]int64{}
	}
	for i := range got {
		key, ok := got[i].Metadata[jobs.FairKeyMetadata]
		b := got[i].Priority
		if !ok || b < MinPriority || b > MaxPriority {
			continue
		}
		t := tenantKey{b, key}
		if us := got[i].RunAt.UnixMicro(); us > m.wm[t] {
			if _, had := m.wm[t]; !had && len(m.wm) >= maxTenantWatermarks {
				clear(m.wm)
			}
			m.wm[t] = us
		}
	}
}

// hint lowers the watermarks of band b's tenants to a job committed due at us (loop): the
// listener's hint carries no key.
func (m *fairMode) hint(b int, us int64) {
	for t, cur := range m.wm {
		if t.band == b && us < cur {
			m.wm[t] = us
		}
	}
}
