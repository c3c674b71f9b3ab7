package worker

import (
	"fmt"
	"math"
	"time"
)

// This file is the fairness hook: how a queue chooses which ready jobs one claim takes.
//
// The zero Fairness is strict priority (highest priority first, oldest first within a
// priority): one index range scan, the cheapest claim. Any other setting turns the claim into
// "segments": each segment is one priority band and one age window, read oldest-first through
// the ready index with its own LIMIT; the database orders the candidates by the segment's rank
// and the band quotas and takes the batch (db/queries.sql, ClaimSegments). Everything a policy
// decides is computed here, in the application, from the configuration and what earlier claims
// returned; the claim stays one statement and never sorts the whole ready set.

// Aging raises a waiting job's effective priority by one for every Step it has waited since it
// became due, by at most MaxBoost. With Step 5m and MaxBoost 3, a low job (1) that waited 10
// minutes competes as 3 (high); after 15 minutes as 4.
type Aging struct {
	Step     time.Duration
	MaxBoost int // default 3
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
}

// Strict reports whether f is plain strict priority.
func (f Fairness) Strict() bool { return f.Aging == nil && len(f.Quotas) == 0 && f.Deadline <= 0 }

func (f Fairness) validate(queue string) error {
	bad := func(field, msg string, args ...any) error {
		return fmt.Errorf("%w: queue %q: Fairness.%s: %s", ErrInvalidConfig, queue, field, fmt.Sprintf(msg, args...))
	}
	if f.Aging != nil {
		if f.Aging.Step < time.Second {
			return bad("Aging.Step", "must be at least 1s, got %v", f.Aging.Step)
		}
		if f.Aging.MaxBoost < 0 || f.Aging.MaxBoost > maxPriority-minPriority {
			return bad("Aging.MaxBoost", "must be within 0..%d", maxPriority-minPriority)
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
	minPriority = 1
	maxPriority = 9
)

// segment is one (band, age window) slice of the ready set, as ClaimSegments reads it.
type segment struct {
	priority       int
	minAge, maxAge time.Duration // maxAge 0 = unbounded
	limit          int
	rank           int // smaller first; 0 = deadline-promoted (ignores quotas)
	quota          int
}

// policy is a queue's fairness state. Claims of one queue are sequential, so it needs no lock.
type policy struct {
	f      Fairness
	credit [maxPriority + 1]float64 // quota deficit per band
	weight float64
}

func newPolicy(f Fairness) *policy {
	p := &policy{f: f}
	if f.Aging != nil && f.Aging.MaxBoost == 0 {
		a := *f.Aging
		a.MaxBoost = 3
		p.f.Aging = &a
	}
	for _, w := range f.Quotas {
		p.weight += float64(w)
	}
	return p
}

// plan returns the segments of a claim of n jobs (nil = strict).
func (p *policy) plan(n int) []segment {
	if p.f.Strict() {
		return nil
	}
	quota := p.quotas(n)
	boost := 0
	var step time.Duration
	if p.f.Aging != nil {
		boost, step = p.f.Aging.MaxBoost, p.f.Aging.Step
	}
	segs := make([]segment, 0, (maxPriority-minPriority+1)*(boost+2))
	for prio := maxPriority; prio >= minPriority; prio-- {
		upper := time.Duration(0) // the band's age windows end here (0 = unbounded)
		if p.f.Deadline > 0 {
			segs = append(segs, segment{priority: prio, minAge: p.f.Deadline, limit: n, rank: 0, quota: quota[prio]})
			upper = p.f.Deadline
		}
		for k := 0; k <= boost; k++ {
			lo, hi := time.Duration(k)*step, time.Duration(k+1)*step
			if k == boost {
				hi = 0
			}
			if upper > 0 && (hi == 0 || hi > upper) {
				hi = upper
			}
			if upper > 0 && lo >= upper {
				break
			}
			eff := min(prio+k, maxPriority+boost)
			segs = append(segs, segment{priority: prio, minAge: lo, maxAge: hi, limit: n,
				rank: 1 + (maxPriority + boost - eff), quota: quota[prio]})
		}
	}
	return segs
}

// quotas turns the configured shares into this batch's per-band quota, carrying the fractional
// remainder (deficit) over to later batches.
func (p *policy) quotas(n int) [maxPriority + 1]int {
	var q [maxPriority + 1]int
	if p.weight == 0 {
		for i := range q {
			q[i] = n // no quotas: every band may fill the batch; rank decides
		}
		return q
	}
	for prio, w := range p.f.Quotas {
		p.credit[prio] += float64(n) * float64(w) / p.weight
		q[prio] = int(math.Floor(p.credit[prio] + 1e-9))
	}
	return q
}

// observe updates the deficit after a claim returned got[prio] jobs per band.
func (p *policy) observe(n int, got *[maxPriority + 1]int) {
	if p.weight == 0 {
		return
	}
	for prio := range p.f.Quotas {
		quota := int(math.Floor(p.credit[prio] + 1e-9))
		c := p.credit[prio] - float64(got[prio])
		if got[prio] < quota || c < 0 {
			c = 0 // the band ran dry, or took overflow: no debt either way
		}
		// never bank more than one batch of credit
		p.credit[prio] = min(c, float64(n))
	}
}
