package worker

import "time"

// clock is the engine's source of time for its own timing decisions: the finish batcher's
// linger (finish.go), the stop plan (worker.go), the error-log throttle (logthrottle.go), the
// permit regrow wait (permits.go), the flow prune's schedule (limits.go) and the queue state
// poll (pause.go). The real clock is
// the default; tests set a fake one (export_test.go, clock_test.go) to check those decisions
// across their boundaries without sleeping. Decisions made on the database clock (rate-limit
// windows, periodic ticks, leases) are not on it: the database owns that time.
type clock interface {
	Now() time.Time
	// NewTimer returns a stopped-or-running timer as time.NewTimer does.
	NewTimer(d time.Duration) timer
	// NewTicker returns a ticker as time.NewTicker does.
	NewTicker(d time.Duration) ticker
}

// ticker is the part of *time.Ticker the engine uses.
type ticker interface {
	C() <-chan time.Time
	Stop()
}

// timer is the part of *time.Timer the engine uses.
type timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// realClock is the system clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
func (r realTimer) Stop() bool                 { return r.t.Stop() }

func (realClock) NewTicker(d time.Duration) ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
