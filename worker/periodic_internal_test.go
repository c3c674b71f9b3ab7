package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type catchUpArgs struct{}

func (catchUpArgs) Kind() string        { return "catch_up" }
func (catchUpArgs) PayloadVersion() int { return 1 }

func catchUpJob(t *testing.T, sched Schedule, o *PeriodicOptions) *PeriodicJob {
	t.Helper()
	p := NewPeriodicJob("catch-up", sched, func(context.Context, Tick) (catchUpArgs, error) { return catchUpArgs{}, nil }, o)
	require.NoError(t, p.validate())
	return &p
}

// TestPeriodicCatchUp: what the periodic service does with a due stored tick at a given
// database time (the database owns this clock: the decision takes it as an argument). On
// time, one job and nothing missed; after downtime, CatchUpOnce enqueues one job for the
// latest tick that stands for the missed ones, CatchUpSkip enqueues the latest only within
// MisfireGrace and drops the rest. The next tick is always the first after now. (recorded:
// the ticks the schedule's row counts as missed.)
func TestPeriodicCatchUp(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) // on the 1-minute grid
	type want struct {
		latest   time.Time
		missed   int
		next     time.Time
		enqueue  bool
		recorded int64
	}
	check := func(p *PeriodicJob, now time.Time, w want) {
		t.Helper()
		latest, missed, next, enqueue, dropped := p.engine().CatchUp(t0, now)
		require.Equal(t, w, want{latest, missed, next, enqueue, dropped}, "now = t0 + %v", now.Sub(t0))
	}
	every := catchUpJob(t, Every(time.Minute), nil)
	check(every, t0, want{t0, 0, t0.Add(time.Minute), true, 0})                                                              // at the tick
	check(every, t0.Add(time.Minute-time.Nanosecond), want{t0, 0, t0.Add(time.Minute), true, 0})                             // just before the next
	check(every, t0.Add(time.Minute), want{t0.Add(time.Minute), 1, t0.Add(2 * time.Minute), true, 1})                        // the next is due too
	check(every, t0.Add(10*time.Minute+time.Second), want{t0.Add(10 * time.Minute), 10, t0.Add(11 * time.Minute), true, 10}) // downtime: one job

	skip := catchUpJob(t, Every(time.Minute), &PeriodicOptions{CatchUp: CatchUpSkip, MisfireGrace: 5 * time.Second})
	check(skip, t0.Add(5*time.Second), want{t0, 0, t0.Add(time.Minute), true, 0}) // within the grace
	check(skip, t0.Add(5*time.Second+time.Microsecond), want{t0, 0, t0.Add(time.Minute), false, 1})
	check(skip, t0.Add(10*time.Minute+time.Second), want{t0.Add(10 * time.Minute), 10, t0.Add(11 * time.Minute), true, 10})
	check(skip, t0.Add(10*time.Minute+time.Minute/2), want{t0.Add(10 * time.Minute), 10, t0.Add(11 * time.Minute), false, 11})

	// A cron schedule is walked tick by tick: 12:00, 12:15, 12:30, 12:45 every hour.
	cron := catchUpJob(t, Cron("*/15 * * * *", ""), &PeriodicOptions{CatchUp: CatchUpSkip})
	check(cron, t0.Add(14*time.Minute), want{t0, 0, t0.Add(15 * time.Minute), false, 1}) // 14 min late: past the 1 min default grace
	check(cron, t0.Add(46*time.Minute), want{t0.Add(45 * time.Minute), 3, t0.Add(time.Hour), true, 3})
}
