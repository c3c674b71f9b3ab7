package engine

import "time"

// Clock is the engine's source of time for its own timing decisions: the finish batcher's
// linger (worker/finish.go), the stop plan (worker/worker.go), the error-log throttle
// (logthrottle.go), the permit regrow wait (worker/permits.go), the flow prune's schedule
// (worker/limits.go) and the queue state poll (worker/pause.go). The real clock is
// the default; tests set a fake one (worker/export_test.go, worker/clock_test.go) to check those decisions
// across their boundaries without sleeping. Decisions made on the database clock (rate-limit
// windows, periodic ticks, leases) are not on it: the database owns that time.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped-or-running timer as time.NewTimer does.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker as time.NewTicker does.
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of *time.Ticker the engine uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Timer is the part of *time.Timer the engine uses.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// RealClock is the system clock.
type RealClock struct{}

func (RealClock) Now() time.Time { return time.Now() }

func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
func (r realTimer) Stop() bool                 { return r.t.Stop() }

func (RealClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
