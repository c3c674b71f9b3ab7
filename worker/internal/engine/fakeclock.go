package engine

import (
	"sync"
	"time"
)

// FakeClock is a Clock (clock.go) for tests (the engine's, and worker's through export_test.go)
// that moves only when a test calls Advance. Its timers fire
// (a non-blocking send on their 1-buffered channel, as a real timer's) when Advance reaches
// their time; Stop and Reset drain an unread fire, as Go's timers do since Go 1.23.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	tickers []*fakeTicker
	armed   chan struct{} // signalled (1-buffered) whenever a timer is started or reset
}

func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, armed: make(chan struct{}, 1)}
}

// Armed is signalled each time a timer is started or reset.
func (f *FakeClock) Armed() <-chan struct{} { return f.armed }

func (f *FakeClock) signalArmed() {
	select {
	case f.armed <- struct{}{}:
	default:
	}
}

func (f *FakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *FakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), at: f.now.Add(d), on: true}
	f.timers = append(f.timers, t)
	f.fireLocked()
	f.signalArmed()
	return t
}

// Advance moves the clock d forward and fires the timers due by then, earliest first.
func (f *FakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fireLocked()
}

// Timers is the number of running (armed) timers.
func (f *FakeClock) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.on {
			n++
		}
	}
	return n
}

// NewTicker returns a ticker that ticks each period the clock passes (a non-blocking send, as
// a real ticker's: ticks a slow reader misses are dropped).
func (f *FakeClock) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("non-positive interval for NewTicker")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTicker{f: f, c: make(chan time.Time, 1), every: d, next: f.now.Add(d), on: true}
	f.tickers = append(f.tickers, t)
	return t
}

func (f *FakeClock) fireLocked() {
	for _, t := range f.tickers {
		for t.on && !t.next.After(f.now) {
			select {
			case t.c <- t.next:
			default:
			}
			t.next = t.next.Add(t.every)
		}
	}
	for {
		var first *fakeTimer
		for _, t := range f.timers {
			if t.on && !t.at.After(f.now) && (first == nil || t.at.Before(first.at)) {
				first = t
			}
		}
		if first == nil {
			return
		}
		first.on = false
		select {
		case first.c <- first.at:
		default:
		}
	}
}

type fakeTimer struct {
	f  *FakeClock
	c  chan time.Time
	at time.Time
	on bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.on
	t.on = false
	t.drain()
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.on
	t.drain()
	t.at, t.on = t.f.now.Add(d), true
	t.f.fireLocked()
	t.f.signalArmed()
	return was
}

func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

type fakeTicker struct {
	f     *FakeClock
	c     chan time.Time
	every time.Duration
	next  time.Time
	on    bool
}

func (t *fakeTicker) C() <-chan time.Time { return t.c }

func (t *fakeTicker) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.on = false
}
