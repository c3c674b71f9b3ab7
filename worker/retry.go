package worker

import (
	"math/rand/v2"
	"sync"
	"time"
)

// RetryPolicy computes the delay before the next attempt of a failed job. attempt is the
// attempt that just failed (1 for the first).
type RetryPolicy interface {
	Delay(attempt int, code ErrorCode) time.Duration
}

// FullJitter is exponential backoff with full jitter: the delay is uniform in
// [0, min(Cap, Base * 2^attempt)). It spreads retries of jobs that failed together, so a
// recovering dependency is not hit by a synchronized wave.
type FullJitter struct {
	Base time.Duration // default 1s
	Cap  time.Duration // default 1h
	// Rand returns a float in [0, 1). Default: math/rand/v2. Inject one to make tests exact.
	Rand func() float64
}

// Bound is the upper limit of the delay after the given attempt.
func (f FullJitter) Bound(attempt int) time.Duration {
	base, capd := f.Base, f.Cap
	if base <= 0 {
		base = time.Second
	}
	if capd <= 0 {
		capd = time.Hour
	}
	if attempt < 0 {
		attempt = 0
	}
	if attempt >= 62 {
		return capd
	}
	b := base << uint(attempt)
	if b <= 0 || b > capd || b>>uint(attempt) != base { // overflow or past the cap
		return capd
	}
	return b
}

// Delay implements RetryPolicy.
func (f FullJitter) Delay(attempt int, _ ErrorCode) time.Duration {
	r := f.Rand
	if r == nil {
		r = rand.Float64
	}
	return time.Duration(r() * float64(f.Bound(attempt)))
}

// lockedRand wraps a *rand.Rand for concurrent use (for tests that want a seeded source).
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

// seededRand returns a concurrency-safe func() float64 from a fixed seed, for FullJitter.Rand
// (tests; exported to them by export_test.go).
func seededRand(seed uint64) func() float64 {
	l := &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	return func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.r.Float64()
	}
}
