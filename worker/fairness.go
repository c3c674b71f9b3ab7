package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenureq/tenure/worker/internal/engine"
)

// This file is the fairness configuration (Fairness, Aging) and its validation; the fairness
// hook itself, the policy a queue's claims follow, is engine.Policy
// (internal/engine/fairness.go).

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

// The priority bands, as the engine code still in this package names them.
const (
	minPriority = engine.MinPriority
	maxPriority = engine.MaxPriority
)

// engine returns f as the engine's fairness hook configuration (engine.Fairness).
func (f Fairness) engine() engine.Fairness {
	ef := engine.Fairness{Quotas: f.Quotas, Deadline: f.Deadline, FairShare: f.FairShare}
	if f.Aging != nil {
		ef.Aging = &engine.Aging{Step: f.Aging.Step, Ceiling: f.Aging.Ceiling}
	}
	return ef
}

// ErrFairShareWithLimits: a queue with Fairness.FairShare cannot have Limits yet (the limited
// claim does not serve tenants round robin). Returned by New, wrapped with ErrInvalidConfig.
var ErrFairShareWithLimits = errors.New("tenure: fair share does not combine with limits yet")
