package worker

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// This file is the fairness hook: how a queue chooses which ready jobs one claim takes.
//
// A claim is described as "segments": each segment is one priority band and one age window
// (on the database clock), read oldest-first through the ready index with its own LIMIT.
// Without quotas the segments are served in the policy's order and the statement stops as
// soon as the batch is full (db/queries.sql, ClaimOrdered): the zero Fairness, strict
// priority, is one segment per band, highest first. With quotas the database ranks the
// candidates of every segment by rank and band quota and takes the batch (ClaimSegments).
// Everything a policy decides is computed here, in the application, from the configuration and
// what earlier claims returned; the claim stays one statement and never sorts the whole ready
// set.

// Aging raises a waiting job's effective priority by one for every Step it has waited since it
// became due, up to Ceiling (default 4, PriorityCritical). Among jobs of equal effective
// priority, the one promoted further (lower base priority) goes first, then the oldest. So a
// job of base priority p reaches the ceiling after (Ceiling-p)*Step and is then taken before
// every job at the ceiling with a higher base priority: under sustained overload its wait stays
// bounded by about (Ceiling-p)*Step plus the time to drain the promoted jobs ahead of it, and
// the overload is pushed onto the higher priorities instead. Jobs whose base priority is at or
// above the ceiling are not aged.
type Aging struct {
	Step    time.Duration
	Ceiling int
}

// Fairness configures how a queue shares its workers between priorities. The zero value is
// strict priority, which is a valid choice when low priorities may wait indefinitely.
//
// Whatever the policy, SKIP LOCKED gives no strict FIFO: concurrent claimers skip each other's
// locked rows, so two jobs may start in a different order than they became due.
type Fairness struct {
	// Aging, when set, raises effective priority with waiting time.
	Aging *Aging
	// Quotas reserves shares of every claim batch per priority (e.g. {3: 12, 2: 6, 1: 2}: of 20
	// jobs, 12 high, 6 normal, 2 low). Shares are weights, honoured over consecutive batches
	// (deficit accounting) so they hold even when batches are small. A band's unused share flows
	// to the others in priority order: quotas never leave a worker idle while work exists.
	// Priorities without a share only get what flows.
	Quotas map[int]int
	// Deadline, when > 0, takes jobs that have waited longer than Deadline first, oldest first,
	// whatever their priority.
	Deadline time.Duration
	// FairShare, when set, serves the tenants of each priority band round robin (jobs carry a
	// tenant in jobs.InsertOpts.FairKey): every tenant with ready jobs gets one start per
	// round, so a tenant with a million queued jobs and a tenant with one both make progress.
	// It combines with Aging, Quotas and Deadline (they decide the bands' order and shares; fair
	// share decides the order within them), not with QueueConfig.Limits. See fairshare.go.
	FairShare bool
}

// Strict reports whether f is plain strict priority.
func (f Fairness) Strict() bool {
	return f.Aging == nil && len(f.Quotas) == 0 && f.Deadline <= 0 && !f.FairShare
}

func (f Fairness) validate(queue string) error {
	bad := func(field, msg string, args ...any) error {
		return fmt.Errorf("%w: queue %q: Fairness.%s: %s", ErrInvalidConfig, queue, field, fmt.Sprintf(msg, args...))
	}
	if f.Aging != nil {
		if f.Aging.Step < time.Second {
			return bad("Aging.Step", "must be at least 1s, got %v", f.Aging.Step)
		}
		if f.Aging.Ceiling != 0 && (f.Aging.Ceiling < minPriority+1 || f.Aging.Ceiling > maxPriority) {
			return bad("Aging.Ceiling", "must be within %d..%d", minPriority+1, maxPriority)
		}
	}
	for p, w := range f.Quotas {
		if p < minPriority || p > maxPriority {
			return bad("Quotas", "priority %d outside %d..%d", p, minPriority, maxPriority)
		}
		if w < 0 {
			return bad("Quotas", "negative share %d for priority %d", w, p)
		}
	}
	if f.Deadline < 0 {
		return bad("Deadline", "must be >= 0")
	}
	return nil
}

const (
	minPriority         = 1
	maxPriority         = 9
	defaultAgingCeiling = 4
)

// segment is one (band, age window) slice of the ready set, as ClaimSegments reads it.
type segment struct {
	priority       int
	minAge, maxAge time.Duration // maxAge 0 = unbounded
	limit          int
	rank           int // smaller first; 0 = deadline-promoted (ignores quotas)
	quota          int
}

// policy is a queue's fairness state, owned by the queue loop (plan when a claim starts,
// observe when it returns).
type policy struct {
	f      Fairness
	weight float64

	credit [maxPriority + 1]float64 // quota deficit per band
}

// bandCounts holds one number per priority band (index = priority).
type bandCounts [maxPriority + 1]int

func newPolicy(f Fairness) *policy {
	p := &policy{f: f}
	if f.Aging != nil && f.Aging.Ceiling == 0 {
		a := *f.Aging
		a.Ceiling = defaultAgingCeiling
		p.f.Aging = &a
	}
	for _, w := range f.Quotas {
		p.weight += float64(w)
	}
	return p
}

// plan returns the segments of a claim of n jobs in serving order, the band quotas it used
// (pass them back to observe), and whether the claim must rank all candidates together
// (quotas or deadlines: ClaimSegments; otherwise the segments are served in order:
// ClaimOrdered).
//
// Ranks: deadline-promoted segments are 0 (first, oldest first across bands); otherwise higher
// effective priority first, and within one effective priority the lower base priority (the
// more promoted job). Strict priority is one segment per band, highest first.
func (p *policy) plan(n int) ([]segment, bandCounts, bool) {
	quota := p.quotas(n)
	ceiling, step := 0, time.Duration(0)
	if p.f.Aging != nil {
		ceiling, step = p.f.Aging.Ceiling, p.f.Aging.Step
	}
	rank := func(eff, base int) int { return 1 + (maxPriority-eff)*(maxPriority+1) + base }
	segs := make([]segment, 0, 2*(maxPriority-minPriority+1)+ceiling*ceiling)
	for prio := maxPriority; prio >= minPriority; prio-- {
		upper := time.Duration(0) // the band's age windows end here (0 = unbounded)
		if p.f.Deadline > 0 {
			segs = append(segs, segment{priority: prio, minAge: p.f.Deadline, limit: n, rank: 0, quota: quota[prio]})
			upper = p.f.Deadline
		}
		levels := 0 // age windows beyond the first
		if ceiling > prio {
			levels = ceiling - prio
		}
		for k := 0; k <= levels; k++ {
			lo, hi := time.Duration(k)*step, time.Duration(k+1)*step
			if k == levels {
				hi = 0
			}
			if upper > 0 {
				if lo >= upper {
					break
				}
				if hi == 0 || hi > upper {
					hi = upper
				}
			}
			segs = append(segs, segment{priority: prio, minAge: lo, maxAge: hi, limit: n,
				rank: rank(prio+k, prio), quota: quota[prio]})
		}
	}
	// Serving order (ranks of different bands always differ, except deadline segments, which
	// ClaimSegments orders oldest first across bands).
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].rank < segs[j].rank })
	// Quotas, and deadlines (oldest first across bands), need the database to rank the
	// candidates of all segments together.
	return segs, quota, p.weight > 0 || p.f.Deadline > 0
}

// quotas turns the configured shares into this batch's per-band quota: each band earns
// n*share/total credit per batch, gets the whole units of its credit, and the units left over
// go to the bands with the largest fractional credit (largest remainder), so the quotas add
// up to n and small batches still follow the shares over time (deficit round robin).
func (p *policy) quotas(n int) bandCounts {
	var q bandCounts
	if p.weight == 0 {
		for i := range q {
			q[i] = n // no quotas: every band may fill the batch; rank decides
		}
		return q
	}
	left := n
	for prio, w := range p.f.Quotas {
		if w == 0 {
			continue
		}
		p.credit[prio] += float64(n) * float64(w) / p.weight
		q[prio] = max(0, int(math.Floor(p.credit[prio]+1e-9)))
		left -= q[prio]
	}
	for ; left > 0; left-- {
		best := 0
		for prio, w := range p.f.Quotas {
			if w == 0 {
				continue
			}
			frac := p.credit[prio] - float64(q[prio])
			bestFrac := p.credit[best] - float64(q[best])
			if best == 0 || frac > bestFrac || (frac == bestFrac && prio > best) {
				best = prio
			}
		}
		if best == 0 {
			break
		}
		q[best]++
	}
	return q
}

// observe charges each band for what the claim gave it, up to its quota: a band that ran dry
// (got less than its quota) loses its credit (no banking while idle), and jobs a band took
// beyond its quota (the share of a dry band flowing to it) are free.
func (p *policy) observe(n int, quota bandCounts, got *bandCounts) {
	if p.weight == 0 {
		return
	}
	for prio, w := range p.f.Quotas {
		if w == 0 {
			continue
		}
		q := quota[prio]
		c := p.credit[prio] - float64(min(got[prio], q))
		if got[prio] < q {
			c = 0
		}
		p.credit[prio] = max(-1, min(c, float64(n)))
	}
}
