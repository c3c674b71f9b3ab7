package engine

import (
	"time"

	"github.com/tenureq/tenure/cron"
)

// Ticks is a periodic schedule's tick grid (worker.Schedule's): the multiples of Every since
// the Unix epoch (UTC), or the ticks of Cron. The periodic service (worker/periodic.go) asks
// it when a schedule's next tick is and what to do about the ticks that passed while no
// worker could enqueue them (CatchUp); the times it is given are the database's.
type Ticks struct {
	Every time.Duration
	Cron  *cron.Schedule
}

// Next returns the first tick strictly after t.
func (s *Ticks) Next(t time.Time) time.Time {
	if s.Cron != nil {
		return s.Cron.Next(t)
	}
	d := s.Every.Nanoseconds()
	// Ticks are multiples of d since the epoch; floor division also for times before 1970.
	ns := t.UnixNano()
	k := ns / d
	if ns < 0 && ns%d != 0 {
		k--
	}
	return time.Unix(0, (k+1)*d).UTC()
}

// Period is the schedule's period around t: the interval, or the span between the cron
// schedule's next two ticks after t.
func (s *Ticks) Period(t time.Time) time.Duration {
	if s.Cron == nil {
		return s.Every
	}
	a := s.Next(t)
	return s.Next(a).Sub(a)
}

// maxMissedCount bounds the ticks counted when catching up after downtime (cron schedules
// are walked tick by tick; intervals are computed).
const maxMissedCount = 100000

// Due returns, for a schedule whose stored tick is t and a database time now >= t, the
// latest tick <= now, how many earlier due ticks there are (t included when it is not the
// latest), and the first tick after now.
func (s *Ticks) Due(t, now time.Time) (latest time.Time, missed int, next time.Time) {
	if s.Cron == nil {
		d := s.Every
		k := now.Sub(t) / d // whole periods since t (t is on the grid, unless the spec changed)
		latest = t.Add(k * d)
		return latest, int(k), s.Next(now)
	}
	latest = t
	for n := s.Next(t); !n.IsZero() && !n.After(now); n = s.Next(n) {
		latest = n
		if missed++; missed >= maxMissedCount {
			break
		}
	}
	return latest, missed, s.Next(now)
}

// CatchUp is the decision for the due stored tick t at database time now: the latest tick
// <= now, the earlier due ticks (missed), the first tick after now, whether one job is
// enqueued (always when once, worker.CatchUpOnce; otherwise, worker.CatchUpSkip, only if now
// is at most grace, the MisfireGrace, past the latest tick) and how many ticks the schedule's
// row records as missed (the earlier ones, and the latest too when it is not enqueued; under
// CatchUpSkip they are dropped).
func (s *Ticks) CatchUp(t, now time.Time, once bool, grace time.Duration) (latest time.Time, missed int, next time.Time, enqueue bool, dropped int64) {
	latest, missed, next = s.Due(t, now)
	enqueue = once || now.Sub(latest) <= grace
	dropped = int64(missed)
	if !enqueue {
		dropped++ // the latest one too
	}
	return latest, missed, next, enqueue, dropped
}
