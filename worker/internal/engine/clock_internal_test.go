package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// These tests check the engine's timing decisions on a fake clock (clock_test.go): each is
// exact at its boundary (one tick before, at) and independent of the machine's load. Waiting
// for the batcher goroutine to act is a liveness bound, never a measure of pace.

var clockStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// batcherOn starts w.batcher on a fake clock with unbuffered channels (a send returns once the
// batcher took it) and returns the worker, the clock and a receive with a liveness bound.
func batcherOn(t *testing.T, linger time.Duration) (*Engine, *FakeClock, func() []*Execution) {
	t.Helper()
	fc := NewFakeClock(clockStart)
	w := &Engine{cfg: Config{FinishLinger: linger, MaxFinishBatch: 500}, clk: fc,
		finishCh: make(chan *Execution), writeCh: make(chan []*Execution)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.batcher(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	recv := func() []*Execution {
		t.Helper()
		select {
		case b := <-w.writeCh:
			return b
		case <-time.After(30 * time.Second):
			t.Fatal("the batcher handed over no batch")
			return nil
		}
	}
	return w, fc, recv
}

// noBatch asserts that the batcher holds its batch. Sending e (unbuffered) first makes the
// batcher run a whole iteration, so a batch it were going to hand over would be offered.
func noBatch(t *testing.T, w *Engine, e *Execution) {
	t.Helper()
	w.finishCh <- e
	select {
	case b := <-w.writeCh:
		t.Fatalf("the batcher handed over %d finishes before its linger ran out", len(b))
	default:
	}
}

// TestBatcherLingersUntilTheDeadline: a lone finish is held exactly FinishLinger, counted from
// the batch's first finish (later ones do not extend it), then the whole batch goes out.
func TestBatcherLingersUntilTheDeadline(t *testing.T) {
	const linger = 5 * time.Millisecond
	w, fc, recv := batcherOn(t, linger)
	first, second, third := &Execution{}, &Execution{}, &Execution{}
	w.finishCh <- first
	waitArmed(t, fc)
	fc.Advance(linger - time.Microsecond)
	noBatch(t, w, second) // a microsecond before the deadline: held
	noBatch(t, w, third)
	fc.Advance(time.Microsecond) // the deadline of the first finish
	require.Equal(t, []*Execution{first, second, third}, recv())
	require.Zero(t, fc.Timers(), "the linger timer is stopped once the batch went out")

	// The next batch lingers again, from its own first finish.
	fourth := &Execution{}
	w.finishCh <- fourth
	waitArmed(t, fc)
	fc.Advance(linger - time.Microsecond)
	noBatch(t, w, &Execution{})
	fc.Advance(time.Microsecond)
	require.Len(t, recv(), 2)
}

// TestBatcherDoesNotLingerPastItsTarget: 16 finishes, or a limited job's finish (it frees room
// under a limit), go out at once, without the clock moving.
func TestBatcherDoesNotLingerPastItsTarget(t *testing.T) {
	w, fc, recv := batcherOn(t, time.Hour)
	for range finishLingerTarget - 1 {
		noBatch(t, w, &Execution{})
	}
	w.finishCh <- &Execution{}
	require.Len(t, recv(), finishLingerTarget)
	require.Equal(t, clockStart, fc.Now(), "the clock never moved")

	noBatch(t, w, &Execution{})
	w.finishCh <- &Execution{limited: true}
	require.Len(t, recv(), 2, "a limited job's finish takes the batch with it at once")
}

// waitArmed waits (a liveness bound) until the batcher armed its linger timer.
func waitArmed(t *testing.T, fc *FakeClock) {
	t.Helper()
	for fc.Timers() == 0 {
		select {
		case <-fc.Armed():
		case <-time.After(30 * time.Second):
			t.Fatal("the batcher never armed its linger timer")
		}
	}
}

// TestStopPlanFromTheDeadline: handlers are cancelled HardStopGrace before Stop's deadline, or
// half-way to it when it is closer than twice that; the release comes a quarter of the reserve
// later; a deadline already past leaves no reserve. A later Stop keeps the earlier of each time.
func TestStopPlanFromTheDeadline(t *testing.T) {
	dl := time.Now().Add(time.Hour) // a real deadline: planFor reads it from ctx
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	fc := NewFakeClock(dl.Add(-10 * time.Second))
	w := &Engine{cfg: Config{HardStopGrace: 2 * time.Second}, clk: fc}

	p := w.planFor(ctx)
	require.Equal(t, dl.Add(-2*time.Second), p.hardAt)
	require.Equal(t, dl.Add(-1500*time.Millisecond), p.releaseAt)
	require.Equal(t, dl, p.deadline)

	fc.Advance(9 * time.Second) // 1 s left: half of it is the reserve
	q := w.planFor(ctx)
	require.Equal(t, dl.Add(-500*time.Millisecond), q.hardAt)
	require.Equal(t, dl.Add(-375*time.Millisecond), q.releaseAt)

	fc.Advance(2 * time.Second) // past the deadline
	r := w.planFor(ctx)
	require.Equal(t, dl, r.hardAt)
	require.Equal(t, dl, r.releaseAt)

	// A second Stop whose deadline is earlier (an hour earlier, at the first plan's time).
	fc.Advance(-11 * time.Second)
	ctx2, cancel2 := context.WithDeadline(context.Background(), dl.Add(-time.Hour))
	defer cancel2()
	p2 := w.planFor(ctx2) // already past: no reserve
	require.Equal(t, p2, p.merge(p2))
	require.Equal(t, p2, p2.merge(p))
	require.Equal(t, p, p.merge(q), "the earlier hard stop and release are kept")
	require.Equal(t, p, p.merge(stopPlan{}), "a Stop without a deadline tightens nothing")
	require.Equal(t, stopPlan{}, w.planFor(context.Background()))
}

// TestEngineErrorLogsOncePerWindow: repeated failures of one source are logged at most once
// per ErrorLogEvery, the next line counting those held back; every failure is still recorded
// as the last error, at the clock's time.
func TestEngineErrorLogsOncePerWindow(t *testing.T) {
	var buf bytes.Buffer
	fc := NewFakeClock(clockStart)
	w := &Engine{log: slog.New(slog.NewTextHandler(&buf, nil)), m: newMetrics(), clk: fc}
	var th LogThrottle
	th.Every = ErrorLogEvery
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }
	fail := func() { w.engineError(&th, "claim", errors.New("boom")) }

	fail()
	require.Len(t, lines(), 1)
	for range 4 {
		fc.Advance(ErrorLogEvery/4 - time.Nanosecond) // ends a nanosecond before the window
		fail()
	}
	require.Len(t, lines(), 1, "logged again within ErrorLogEvery:\n%s", buf.String())
	require.Equal(t, fc.Now(), w.m.lastErrorAt, "the last failure is recorded even when not logged")

	fc.Advance(4 * time.Nanosecond) // exactly ErrorLogEvery after the first line
	fail()
	require.Len(t, lines(), 2)
	require.Contains(t, lines()[1], "not_logged_since_last=4")

	fc.Advance(time.Hour) // a long quiet spell: the next failure is logged, nothing held back
	fail()
	require.Len(t, lines(), 3)
	require.NotContains(t, lines()[2], "not_logged_since_last")
}

// TestPermitRegrowWaits: a worker held below what it wants asks for a larger share
// permitRegrow after its last allocation, permitOwedRegrow when it was granted less than its
// fair share, and never when it has what it wants.
func TestPermitRegrowWaits(t *testing.T) {
	ps := &permitView{amount: 2, last: clockStart}
	require.False(t, ps.mayGrow(4, clockStart.Add(permitRegrow-time.Nanosecond)))
	require.True(t, ps.mayGrow(4, clockStart.Add(permitRegrow)))
	require.False(t, ps.mayGrow(2, clockStart.Add(time.Hour)), "it has what it wants")

	ps.owed = true
	require.False(t, ps.mayGrow(4, clockStart.Add(permitOwedRegrow-time.Nanosecond)))
	require.True(t, ps.mayGrow(4, clockStart.Add(permitOwedRegrow)))
}

// TestFlowPruneSchedule: the reclaim service's flow prune runs at most once per PruneEvery,
// and after a stall (a clock jump of many periods) once, not once per missed period.
func TestFlowPruneSchedule(t *testing.T) {
	fc := NewFakeClock(clockStart)
	w := &Engine{cfg: Config{PruneEvery: time.Minute}, m: newMetrics(), clk: fc} // no queues: a pass runs no statement
	fp := &flowPruner{}
	ctx := context.Background()
	w.maybePruneFlow(ctx, fp)
	require.Equal(t, clockStart.Add(time.Minute), fp.next, "the first call runs a pass")

	fc.Advance(time.Minute - time.Nanosecond)
	w.maybePruneFlow(ctx, fp)
	require.Equal(t, clockStart.Add(time.Minute), fp.next, "no pass before PruneEvery")

	fc.Advance(time.Nanosecond)
	w.maybePruneFlow(ctx, fp)
	require.Equal(t, clockStart.Add(2*time.Minute), fp.next)

	fc.Advance(10 * time.Minute)
	w.maybePruneFlow(ctx, fp)
	w.maybePruneFlow(ctx, fp)
	require.Equal(t, fc.Now().Add(time.Minute), fp.next, "one pass after the stall, the next a period later")
}
