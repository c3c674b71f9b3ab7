package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenureq/tenure/cron"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// ErrInvalidSchedule means a periodic job cannot be scheduled: an empty, too long or
// duplicate name, a missing args function, an interval below one second (or not a whole
// number of microseconds), a cron expression that does not parse (the error also matches
// cron.ErrInvalidSpec) or an unknown time zone (cron.ErrUnknownTimeZone), a negative
// MisfireGrace or Jitter, or insert options with RunAt or Delay. New returns it wrapped
// together with ErrInvalidConfig; both match with errors.Is.
var ErrInvalidSchedule = errors.New("tenure: invalid periodic schedule")

// Schedule says when a periodic job is due: Every (a fixed interval) or Cron (a 5-field cron
// expression in a time zone). The zero Schedule is invalid.
type Schedule struct {
	ticks    engine.Ticks // Every, or Cron once validate parsed expr
	expr, tz string
	isCron   bool
}

// Every returns a schedule whose ticks are the multiples of d since the Unix epoch (UTC):
// Every(time.Second) ticks on each whole second, Every(time.Hour) on each whole hour, the
// same ticks for every worker and across restarts. d must be at least one second and a whole
// number of microseconds.
func Every(d time.Duration) Schedule { return Schedule{ticks: engine.Ticks{Every: d}} }

// Cron returns a schedule of the 5-field cron expression expr (package cron documents the
// syntax and the daylight-saving rules) in the IANA time zone timeZone ("" means UTC).
func Cron(expr, timeZone string) Schedule { return Schedule{expr: expr, tz: timeZone, isCron: true} }

func (s *Schedule) validate() error {
	if s.isCron {
		c, err := cron.ParseIn(s.expr, s.tz)
		if err != nil {
			return err
		}
		s.ticks.Cron = c
		return nil
	}
	switch {
	case s.ticks.Every == 0:
		return errors.New("no schedule: use worker.Every or worker.Cron")
	case s.ticks.Every < time.Second:
		return fmt.Errorf("interval %v is below 1s", s.ticks.Every)
	case s.ticks.Every%time.Microsecond != 0:
		return fmt.Errorf("interval %v is not a whole number of microseconds", s.ticks.Every)
	}
	return nil
}

// String describes the schedule as tenure.periodic.spec stores it: "every 1s" or
// "cron */5 * * * * Europe/Berlin". A worker that starts with a different description for a
// name restarts that schedule at the new one's first tick.
func (s Schedule) String() string {
	if s.isCron {
		tz := s.tz
		if tz == "" {
			tz = "UTC"
		}
		return "cron " + strings.Join(strings.Fields(s.expr), " ") + " " + tz
	}
	return "every " + s.ticks.Every.String()
}

// CatchUp says what a schedule does with ticks that passed while no worker could enqueue
// them (every worker was down, or the database was unreachable).
type CatchUp int

const (
	// CatchUpOnce (the default) enqueues one job for all the ticks that passed: its Tick.At
	// is the most recent of them and Tick.Missed counts the earlier ones it stands for.
	CatchUpOnce CatchUp = iota
	// CatchUpSkip drops missed ticks: only the most recent tick that passed is enqueued, and
	// only if the database clock is at most MisfireGrace past it; Tick.Missed counts the
	// earlier ones dropped.
	CatchUpSkip
)

// Tick is what a periodic job's args function is told about the tick it builds a job for.
type Tick struct {
	// Name is the schedule's name.
	Name string
	// At is the scheduled time of the tick (for a run-on-start tick: the database time of the
	// start). Ticks come from the schedule, due times from the database clock.
	At time.Time
	// Missed is the number of earlier ticks that got no job of their own and that this job
	// stands for (CatchUpOnce) or that were dropped (CatchUpSkip). 0 in normal operation.
	Missed int
	// OnStart reports a run-on-start tick (PeriodicOptions.RunOnStart).
	OnStart bool
}

// PeriodicOptions tune a periodic job. A nil *PeriodicOptions, or zero fields, mean defaults.
type PeriodicOptions struct {
	// CatchUp decides what happens to ticks missed while no worker ran. Default CatchUpOnce.
	CatchUp CatchUp
	// MisfireGrace: under CatchUpSkip, a tick found more than MisfireGrace after it passed
	// is dropped. Default 1 minute.
	MisfireGrace time.Duration
	// RunOnStart makes a worker enqueue one extra job when it starts, unless a job of the
	// schedule was enqueued (by any worker) within the schedule's period: the interval, or
	// for a cron schedule the span between its next two ticks. Workers starting together
	// enqueue one job between them. Default false.
	RunOnStart bool
	// Jitter spreads the jobs of ticks: each job is due at its tick plus a uniform random
	// delay in [0, Jitter). The tick bookkeeping is not affected. Default 0.
	Jitter time.Duration
	// Insert are the enqueue options of the jobs (queue, priority, max attempts, lease,
	// metadata); zero fields take the kind's declared, then registered, defaults. RunAt and Delay must be zero
	// (the schedule decides when the job is due). Default nil.
	Insert *jobs.InsertOpts
}

// PeriodicJob is a named schedule that enqueues a job of one kind at each tick. Build it with
// NewPeriodicJob and list it in Config.Periodic.
//
// Every worker that lists a schedule takes part in enqueueing it; each tick is enqueued at
// most once across all of them, by construction: the job is inserted in the same transaction
// as a conditional UPDATE of the schedule's row in tenure.periodic that moves next_run_at from
// this tick to the next (WHERE next_run_at = tick, FOR UPDATE SKIP LOCKED), so a second
// worker's UPDATE for the same tick changes no row and it inserts nothing. Which worker wins
// does not matter and no leader is elected. Due times are compared on the database clock.
type PeriodicJob struct {
	name  string
	sched Schedule
	opts  PeriodicOptions
	kind  string
	args  func(ctx context.Context, t Tick) (generics.Args, error)
}

// NewPeriodicJob returns the periodic job name (1..200 bytes of UTF-8, unique per
// database: workers that list the same name share the schedule) that enqueues the job args
// builds at every tick of sched. The kind A must be registered in the worker's registry (a
// handler in this or another worker, or generics.Register). args runs on the worker that won
// the tick, inside the enqueueing transaction: keep it fast, and return an error to skip
// nothing — the transaction rolls back and the tick is tried again a second later (the error
// is logged and counted in Stats.PeriodicErrors). Invalid arguments surface at New as
// ErrInvalidSchedule.
func NewPeriodicJob[A generics.Args](name string, sched Schedule, args func(ctx context.Context, t Tick) (A, error), opts *PeriodicOptions) PeriodicJob {
	var zero A
	p := PeriodicJob{name: name, sched: sched, kind: zero.Kind()}
	if opts != nil {
		p.opts = *opts
	}
	if args != nil {
		p.args = func(ctx context.Context, t Tick) (generics.Args, error) { return args(ctx, t) }
	}
	return p
}

// Name returns the schedule's name.
func (p PeriodicJob) Name() string { return p.name }

// Schedule returns the schedule.
func (p PeriodicJob) Schedule() Schedule { return p.sched }

func (p *PeriodicJob) validate() error {
	if p.name == "" || len(p.name) > 200 || !utf8.ValidString(p.name) || strings.IndexByte(p.name, 0) >= 0 {
		return fmt.Errorf("name %q must be 1..200 bytes of valid UTF-8 without NUL", p.name)
	}
	if p.args == nil {
		return fmt.Errorf("periodic %q: no args function (build it with worker.NewPeriodicJob)", p.name)
	}
	if err := p.sched.validate(); err != nil {
		return fmt.Errorf("periodic %q: %w", p.name, err)
	}
	o := &p.opts
	if o.MisfireGrace < 0 || o.Jitter < 0 {
		return fmt.Errorf("periodic %q: MisfireGrace and Jitter must be >= 0", p.name)
	}
	if o.CatchUp != CatchUpOnce && o.CatchUp != CatchUpSkip {
		return fmt.Errorf("periodic %q: unknown CatchUp %d", p.name, o.CatchUp)
	}
	if o.MisfireGrace == 0 {
		o.MisfireGrace = time.Minute
	}
	if o.Insert != nil && (!o.Insert.RunAt.IsZero() || o.Insert.Delay != 0) {
		return fmt.Errorf("periodic %q: Insert.RunAt and Insert.Delay must be zero (the schedule decides)", p.name)
	}
	return nil
}

// engine returns p (validated) as the engine runs it.
func (p *PeriodicJob) engine() *engine.Periodic {
	args := p.args
	return &engine.Periodic{Name: p.name, Kind: p.kind, Spec: p.sched.String(), Ticks: p.sched.ticks,
		CatchUpOnce: p.opts.CatchUp == CatchUpOnce, MisfireGrace: p.opts.MisfireGrace, RunOnStart: p.opts.RunOnStart,
		Jitter: p.opts.Jitter, Insert: p.opts.Insert,
		Args: func(ctx context.Context, t engine.Tick) (generics.Args, error) {
			return args(ctx, Tick{Name: t.Name, At: t.At, Missed: t.Missed, OnStart: t.OnStart})
		}}
}
