package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
)

// The heartbeat's lease decisions take their time from the loop's ticker (heartbeat's now) and
// from the statement's start (hbResult.at): given those times, they are exact and independent
// of the machine's load. These tests pass the times a ticker would.

func hbQueue() *queue {
	w := &Engine{cfg: Config{HeartbeatDivisor: 3, StuckGrace: 10 * time.Second}, m: newMetrics(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), clk: NewFakeClock(clockStart), engCtx: context.Background()}
	return &queue{w: w, name: "default", active: map[*Execution]struct{}{}}
}

func hbExec(q *queue, id int64, lease time.Duration) *Execution {
	e := &Execution{start: clockStart, c: claimed{JobRow: &generics.JobRow{ID: id, Lease: lease}}}
	e.ctx, e.end = context.WithCancelCause(context.Background())
	e.leaseUntil.Store(clockStart.Add(lease).UnixNano())
	e.nextHB = clockStart.Add(lease / 3)
	q.active[e] = struct{}{}
	q.running++
	return e
}

// TestHeartbeatLeaseSchedule: an extended lease is heartbeated again lease/HeartbeatDivisor
// after the statement; a row another session holds locked is tried again at half that and the
// lease is lost only once the statement starts at or past the lease's end; two failed
// statements in a row, or a row the statement did not return, lose it; a cancel request
// reaches the handler.
func TestHeartbeatLeaseSchedule(t *testing.T) {
	const lease = 30 * time.Second
	q := hbQueue()
	e := hbExec(q, 1, lease)

	at := clockStart.Add(10 * time.Second)
	q.heartbeatDone(hbResult{due: []*Execution{e}, at: at, rows: []*gen.HeartbeatRow{{ID: 1, Extended: true}}})
	require.Equal(t, at.Add(lease).UnixNano(), e.leaseUntil.Load(), "the lease is extended from the statement's start")
	require.Equal(t, at.Add(lease/3), e.nextHB)

	// Busy (locked by another session): not extended, still ours; tried again at lease/6.
	leaseEnd := at.Add(lease)
	busy := []*gen.HeartbeatRow{{ID: 1}}
	at2 := leaseEnd.Add(-time.Nanosecond)
	q.heartbeatDone(hbResult{due: []*Execution{e}, at: at2, rows: busy})
	require.False(t, e.leaseLost, "busy a nanosecond before the lease's end: still ours")
	require.Equal(t, at2.Add(lease/6), e.nextHB)
	require.NoError(t, context.Cause(e.ctx))
	q.heartbeatDone(hbResult{due: []*Execution{e}, at: leaseEnd, rows: busy})
	require.True(t, e.leaseLost, "busy at the lease's end: lost")
	require.ErrorIs(t, context.Cause(e.ctx), ErrLeaseLost)

	// Failed statements: the first is retried at lease/6, the second in a row loses the lease.
	f := hbExec(q, 2, lease)
	boom := errors.New("connection reset")
	q.heartbeatDone(hbResult{due: []*Execution{f}, at: at, err: boom})
	require.False(t, f.leaseLost)
	require.Equal(t, at.Add(lease/6), f.nextHB)
	q.heartbeatDone(hbResult{due: []*Execution{f}, at: at.Add(lease / 6), err: boom})
	require.True(t, f.leaseLost, "two failed heartbeats in a row")

	// A success in between resets the count.
	g := hbExec(q, 3, lease)
	q.heartbeatDone(hbResult{due: []*Execution{g}, at: at, err: boom})
	q.heartbeatDone(hbResult{due: []*Execution{g}, at: at, rows: []*gen.HeartbeatRow{{ID: 3, Extended: true}}})
	q.heartbeatDone(hbResult{due: []*Execution{g}, at: at, err: boom})
	require.False(t, g.leaseLost, "the failures were not consecutive")

	// A row the statement did not return is no longer this attempt's; a cancel request
	// cancels the handler while the lease is extended.
	h := hbExec(q, 4, lease)
	c := hbExec(q, 5, lease)
	q.heartbeatDone(hbResult{due: []*Execution{h, c}, at: at, rows: []*gen.HeartbeatRow{{ID: 5, Extended: true, CancelRequested: true}}})
	require.True(t, h.leaseLost)
	require.False(t, c.leaseLost)
	require.ErrorIs(t, context.Cause(c.ctx), ErrJobCancelled)
	require.EqualValues(t, 3, q.w.m.LeasesLost.Load())
}

// TestHeartbeatDeclaresStuckAfterTimeoutAndGrace: a handler running past its Timeout plus
// StuckGrace is declared stuck at the first tick after that (its slot given back, its context
// cancelled, no more heartbeats), not a nanosecond before.
func TestHeartbeatDeclaresStuckAfterTimeoutAndGrace(t *testing.T) {
	q := hbQueue()
	e := hbExec(q, 1, time.Hour)
	e.h = &Handler{opts: KindOptions{Timeout: time.Minute}}
	e.nextHB = clockStart.Add(24 * time.Hour) // no heartbeat due: the tick only judges the handler
	limit := clockStart.Add(time.Minute + 10*time.Second)

	q.heartbeat(context.Background(), limit)
	require.False(t, e.stuck, "at timeout + grace: not yet")
	require.Equal(t, 1, q.running)
	q.heartbeat(context.Background(), limit.Add(time.Nanosecond))
	require.True(t, e.stuck)
	require.Zero(t, q.running, "the slot is given back")
	require.ErrorIs(t, context.Cause(e.ctx), ErrHandlerTimeout)

	// A returned handler is never stuck, whatever the time.
	r := hbExec(q, 2, time.Hour)
	r.h, r.returned, r.nextHB = e.h, true, e.nextHB
	q.heartbeat(context.Background(), limit.Add(time.Hour))
	require.False(t, r.stuck)
}

// TestHeartbeatPassWhenDue: the loop runs a heartbeat pass when a heartbeat or a stuck deadline
// falls due, not every heartbeatTick (a fixed ticker woke every queue loop 20 times a second:
// 20,000 loop turns a second with 1,000 queues), and never sooner than heartbeatTick after the
// previous pass.
func TestHeartbeatPassWhenDue(t *testing.T) {
	q := hbQueue()
	_, ok := q.hbNext()
	require.False(t, ok, "no job: no pass")

	e := hbExec(q, 1, time.Minute) // next heartbeat at start + 20 s
	e.nextHB = clockStart.Add(20 * time.Second)
	q.hbNote(e)
	at, ok := q.hbNext()
	require.True(t, ok)
	require.Equal(t, clockStart.Add(20*time.Second), at)

	// A handler whose stuck deadline comes first: the pass is due then.
	s := hbExec(q, 2, time.Hour)
	s.h = &Handler{opts: KindOptions{Timeout: time.Second}}
	q.hbNote(s)
	at, _ = q.hbNext()
	require.Equal(t, clockStart.Add(time.Second+10*time.Second), at, "timeout + StuckGrace")

	// A pass with nothing due recomputes the next one from the jobs.
	now := clockStart.Add(time.Second)
	q.heartbeat(context.Background(), now)
	at, _ = q.hbNext()
	require.Equal(t, clockStart.Add(11*time.Second), at, "job 2's stuck deadline, then job 1's heartbeat")
	require.False(t, s.stuck)

	// Due while a statement is in flight: again heartbeatTick later, not at once.
	q.hbInFlight = true
	due := clockStart.Add(20 * time.Second)
	q.heartbeat(context.Background(), due)
	require.True(t, s.stuck)
	at, _ = q.hbNext()
	require.Equal(t, due.Add(heartbeatTick), at)

	// Its answer schedules the next pass at the jobs' next heartbeats.
	q.hbInFlight = false
	q.hbDue = time.Time{}
	q.heartbeatDone(hbResult{due: []*Execution{e}, at: due, rows: []*gen.HeartbeatRow{{ID: 1, Extended: true}}})
	at, _ = q.hbNext()
	require.Equal(t, due.Add(20*time.Second), at)

	// A resync (hbAll): heartbeatTick after the last pass.
	q.hbAll = true
	at, _ = q.hbNext()
	require.Equal(t, due.Add(heartbeatTick), at)
}

// TestHeartbeatResyncOfNoJobEnds: a resync (the listener connected or reconnected) heartbeats
// the jobs active then, to catch the cancel signals missed while it was away. With no job
// active, the resync is done: a job claimed afterwards was claimed with the listener up and is
// heartbeated on its own schedule. The resync stayed pending until some job was active, so
// the first job after every Start was heartbeated as it began, and its row, locked by that
// heartbeat, turned away the claim carrying its completion (busy: handed to the finishers).
func TestHeartbeatResyncOfNoJobEnds(t *testing.T) {
	q := hbQueue()
	q.hbAll = true
	q.heartbeat(context.Background(), clockStart)
	require.False(t, q.hbAll, "a resync with no job active is done")
	_, ok := q.hbNext()
	require.False(t, ok, "no job: no pass")

	e := hbExec(q, 1, time.Minute) // claimed after the resync: next heartbeat at start + 20 s
	q.hbNote(e)
	at, ok := q.hbNext()
	require.True(t, ok)
	require.Equal(t, clockStart.Add(20*time.Second), at, "its own schedule, not at once")

	// A resync with a job active but a statement in flight stays pending.
	q.hbAll, q.hbInFlight = true, true
	q.heartbeat(context.Background(), clockStart.Add(time.Second))
	require.True(t, q.hbAll, "pending while a heartbeat statement is in flight")
}
