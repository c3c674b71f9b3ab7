package engine

import (
	"math"
	"sort"
	"time"
)

// This file is the fairness hook: how a queue chooses which ready jobs one claim takes.
//
// A claim is described as "segments": each segment is one priority band and one age window
// (on the database clock), read oldest-first through the ready index with its own LIMIT, in
// the policy's serving order (rank), by one statement for every policy (db/queries.sql,
// ClaimOrdered). Without quotas or a deadline the statement stops as soon as the batch is full
// (strict priority, the zero Fairness, is one segment per band, highest first; aging adds age
// windows): it locks only what it claims. With quotas or a deadline it reads every segment up
// to its limit and ranks the candidates by rank and band quota (Plan's third result).
// Everything a policy decides is computed here, in the application, from the configuration
// (worker.Fairness, copied to Fairness here) and what earlier claims returned; the claim stays
// one statement and never sorts the whole ready set. The queue loop owns a queue's Policy.

const (
	MinPriority         = 1 // the lowest priority band
	MaxPriority         = 9 // the highest priority band
	defaultAgingCeiling = 4
)

// Segment is one (band, age window) slice of the ready set, as ClaimOrdered reads it.
type Segment struct {
	Priority       int
	MinAge, MaxAge time.Duration // MaxAge 0 = unbounded
	Limit          int
	Rank           int // smaller first; 0 = deadline-promoted (ignores quotas)
	Quota          int
}

// Fairness is the engine's copy of a queue's worker.Fairness (validated by worker.New).
type Fairness struct {
	Aging     *Aging // nil: no aging
	Quotas    map[int]int
	Deadline  time.Duration
	FairShare bool
}

// Aging is worker.Aging: one band up per Step waited, up to Ceiling (0: the default, 4).
type Aging struct {
	Step    time.Duration
	Ceiling int
}

// Policy is a queue's fairness state, owned by the queue loop (Plan when a claim starts,
// Observe when it returns).
type Policy struct {
	F      Fairness // the configuration, Aging.Ceiling defaulted
	weight float64

	credit [MaxPriority + 1]float64 // quota deficit per band
}

// BandCounts holds one number per priority band (index = priority).
type BandCounts [MaxPriority + 1]int

// NewPolicy returns the policy of a queue's fairness configuration.
func NewPolicy(f Fairness) *Policy {
	p := &Policy{F: f}
	if f.Aging != nil && f.Aging.Ceiling == 0 {
		a := *f.Aging
		a.Ceiling = defaultAgingCeiling
		p.F.Aging = &a
	}
	for _, w := range f.Quotas {
		p.weight += float64(w)
	}
	return p
}

// Plan returns the segments of a claim of n jobs in serving order, the band quotas it used
// (pass them back to Observe), and whether the claim must rank all candidates together
// (quotas or deadlines: ClaimOrdered reads every segment up to its Limit and ranks them;
// otherwise it serves the segments in order and stops at the batch: orderedParams).
//
// Ranks: deadline-promoted segments are 0 (first, oldest first across bands); otherwise higher
// effective priority first, and within one effective priority the lower base priority (the
// more promoted job). Strict priority is one segment per band, highest first.
func (p *Policy) Plan(n int) ([]Segment, BandCounts, bool) {
	quota := p.quotas(n)
	ceiling, step := 0, time.Duration(0)
	if p.F.Aging != nil {
		ceiling, step = p.F.Aging.Ceiling, p.F.Aging.Step
	}
	rank := func(eff, base int) int { return 1 + (MaxPriority-eff)*(MaxPriority+1) + base }
	segs := make([]Segment, 0, 2*(MaxPriority-MinPriority+1)+ceiling*ceiling)
	for prio := MaxPriority; prio >= MinPriority; prio-- {
		upper := time.Duration(0) // the band's age windows end here (0 = unbounded)
		if p.F.Deadline > 0 {
			segs = append(segs, Segment{Priority: prio, MinAge: p.F.Deadline, Limit: n, Rank: 0, Quota: quota[prio]})
			upper = p.F.Deadline
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
			segs = append(segs, Segment{Priority: prio, MinAge: lo, MaxAge: hi, Limit: n,
				Rank: rank(prio+k, prio), Quota: quota[prio]})
		}
	}
	// Serving order (ranks of different bands always differ, except deadline segments, which
	// ClaimOrdered ranks oldest first across bands).
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].Rank < segs[j].Rank })
	// Quotas, and deadlines (oldest first across bands), need the database to rank the
	// candidates of all segments together.
	return segs, quota, p.F.Ranked()
}

// Ranked reports whether claims under f rank the candidates of every segment together:
// quotas (a positive share) or a deadline (Plan's third result). The claim batcher carries
// only claims that are not ranked (QueueConfig.Batched).
func (f Fairness) Ranked() bool {
	for _, w := range f.Quotas {
		if w > 0 {
			return true
		}
	}
	return f.Deadline > 0
}

// quotas turns the configured shares into this batch's per-band quota: each band earns
// n*share/total credit per batch, gets the whole units of its credit, and the units left over
// go to the bands with the largest fractional credit (largest remainder), so the quotas add
// up to n and small batches still follow the shares over time (deficit round robin).
func (p *Policy) quotas(n int) BandCounts {
	var q BandCounts
	if p.weight == 0 {
		for i := range q {
			q[i] = n // no quotas: every band may fill the batch; rank decides
		}
		return q
	}
	left := n
	for prio, w := range p.F.Quotas {
		if w == 0 {
			continue
		}
		p.credit[prio] += float64(n) * float64(w) / p.weight
		q[prio] = max(0, int(math.Floor(p.credit[prio]+1e-9)))
		left -= q[prio]
	}
	for ; left > 0; left-- {
		best := 0
		for prio, w := range p.F.Quotas {
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

// Observe charges each band for what the claim gave it, up to its quota: a band that ran dry
// (got less than its quota) loses its credit (no banking while idle), and jobs a band took
// beyond its quota (the share of a dry band flowing to it) are free.
func (p *Policy) Observe(n int, quota BandCounts, got *BandCounts) {
	if p.weight == 0 {
		return
	}
	for prio, w := range p.F.Quotas {
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

// Weighted reports whether the policy has quotas (shares of each claim per band).
func (p *Policy) Weighted() bool { return p.weight > 0 }
