package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenureq/tenure/jobs"
)

// This file is flow control's public side: Limit and its validation. The engine's side (the
// counted claims, the permits, the flow prune, and the proof that a limit holds) is in
// worker/internal/engine (limits.go, permits.go).

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

// PruneFlow runs one bounded pass of the tenure.flow prune over the worker's queues (from the
// start of each) and returns the rows it deleted. The worker runs it every PruneEvery; it is
// exported for operators and tests.
func (w *Worker) PruneFlow(ctx context.Context) (int, error) { return w.e.PruneFlow(ctx) }
