package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/cron"
	"github.com/tenureq/tenure/db/gen"
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

// catchUp is the decision for the due stored tick t at database time now
// (engine.Ticks.CatchUp), under p's CatchUp and MisfireGrace.
func (p *PeriodicJob) catchUp(t, now time.Time) (latest time.Time, missed int, next time.Time, enqueue bool, dropped int64) {
	return p.sched.ticks.CatchUp(t, now, p.opts.CatchUp == CatchUpOnce, p.opts.MisfireGrace)
}

// periodicPollMax is the longest the periodic service sleeps between looks at its schedules
// (it wakes at the earliest next tick otherwise); periodicRetry the wait after an error or a
// tick another worker was holding.
const (
	periodicPollMax = time.Second
	periodicRetry   = 50 * time.Millisecond
)

// registerPeriodic writes this worker's schedules to tenure.periodic at Start (a new name
// starts at its first tick after the database's now; a changed spec restarts there), then
// takes the run-on-start ticks. It runs before the services start.
func (w *Worker) registerPeriodic(ctx context.Context) error {
	if len(w.periodic) == 0 {
		return nil
	}
	q := w.qon(w.eng)
	now, err := q.DatabaseNow(ctx)
	if err != nil {
		return err
	}
	for _, p := range w.periodic {
		if err := w.upsertPeriodic(ctx, q, p, now); err != nil {
			return err
		}
	}
	for _, p := range w.periodic {
		if !p.opts.RunOnStart {
			continue
		}
		if err := w.runOnStart(ctx, p); err != nil {
			return fmt.Errorf("periodic %q: run on start: %w", p.name, err)
		}
	}
	return nil
}

// upsertPeriodic writes p's row (see PeriodicUpsert) with now, the database's time.
func (w *Worker) upsertPeriodic(ctx context.Context, q *gen.Queries, p *PeriodicJob, now time.Time) error {
	queue := jobs.DefaultQueue
	if p.opts.Insert != nil && p.opts.Insert.Queue != "" {
		queue = p.opts.Insert.Queue
	} else if info, ok := w.reg.Lookup(p.kind); ok && info.Defaults.Queue != "" {
		queue = info.Defaults.Queue
	}
	_, err := q.PeriodicUpsert(ctx, gen.PeriodicUpsertParams{Name: p.name, Spec: p.sched.String(), Kind: p.kind,
		Queue: queue, NextRunAt: p.sched.ticks.Next(now)})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) { // no row: unchanged
		return fmt.Errorf("periodic %q: %w", p.name, err)
	}
	return nil
}

func (w *Worker) runOnStart(ctx context.Context, p *PeriodicJob) error {
	enqueued := false
	err := pgx.BeginFunc(ctx, w.eng, func(tx pgx.Tx) error {
		q := w.qon(tx)
		at, err := q.PeriodicRunOnStart(ctx, gen.PeriodicRunOnStartParams{Name: p.name, GapUs: p.sched.ticks.Period(time.Now()).Microseconds()})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // a job was enqueued within the period
		}
		if err != nil {
			return err
		}
		enqueued = true
		return w.enqueueTick(ctx, tx, p, Tick{Name: p.name, At: *at, OnStart: true})
	})
	if err == nil && enqueued {
		w.m.periodicEnqueued.Add(1) // counted once committed
	}
	return err
}

// enqueueTick builds and inserts the tick's job in tx and records its id on the schedule. The
// caller counts it once tx has committed.
func (w *Worker) enqueueTick(ctx context.Context, tx pgx.Tx, p *PeriodicJob, t Tick) error {
	args, err := p.args(ctx, t)
	if err != nil {
		return fmt.Errorf("args: %w", err)
	}
	var o jobs.InsertOpts
	if p.opts.Insert != nil {
		o = *p.opts.Insert
	}
	o.RunAt = t.At
	if p.opts.Jitter > 0 {
		o.RunAt = o.RunAt.Add(time.Duration(rand.Int64N(int64(p.opts.Jitter))))
	}
	row, err := w.client.InsertTx(ctx, tx, args, &o)
	if err != nil {
		return err
	}
	return w.qon(tx).PeriodicSetJob(ctx, gen.PeriodicSetJobParams{JobID: &row.Job.ID, Name: p.name})
}

// periodicService enqueues the ticks of this worker's schedules. It sleeps until the earliest
// next tick (at most periodicPollMax, measured from the database clock), then for each due
// schedule tries to move it to its next tick and enqueue the job in one transaction.
func (w *Worker) periodicService(ctx context.Context) {
	if len(w.periodic) == 0 {
		return
	}
	names := make([]string, len(w.periodic))
	byName := make(map[string]*PeriodicJob, len(w.periodic))
	for i, p := range w.periodic {
		names[i], byName[p.name] = p.name, p
	}
	for {
		wait := periodicPollMax
		qctx, cancel := context.WithTimeout(ctx, sweepTimeout)
		var rows []*gen.PeriodicDueRow
		err := w.retryStale(func() (err error) {
			rows, err = w.q.PeriodicDue(qctx, names)
			return err
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.m.periodicErrors.Add(1)
			w.engineError(&w.periodicLog, "periodic", err)
			wait = periodicPollMax
		}
		if err == nil && len(rows) < len(names) {
			// A row was deleted (an operator dropping a schedule some worker still lists):
			// write it again, from its next tick.
			w.reregisterPeriodic(ctx, rows, byName)
		}
		for _, r := range rows {
			p := byName[r.Name]
			if p == nil {
				continue
			}
			if r.NextRunAt.After(r.DbNow) {
				wait = min(wait, r.NextRunAt.Sub(r.DbNow))
				continue
			}
			took, err := w.fireTick(ctx, p, r.NextRunAt, r.DbNow)
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return
				}
				w.m.periodicErrors.Add(1)
				w.engineError(&w.periodicLog, "periodic", err, "schedule", p.name)
				wait = min(wait, periodicPollMax)
			case took:
				wait = 0 // look again at once: the next tick may be due already
			default:
				wait = min(wait, periodicRetry) // another worker holds or took it
			}
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		} else if ctx.Err() != nil {
			return
		}
	}
}

// fireTick handles the due stored tick t of p at database time now: in one transaction it
// moves the schedule to its first tick after now (only if it still holds t and no other
// worker holds the row) and, unless the catch-up policy drops the ticks, enqueues one job.
// It reports whether this worker took the tick.
func (w *Worker) fireTick(ctx context.Context, p *PeriodicJob, t, now time.Time) (bool, error) {
	latest, missed, next, enqueue, dropped := p.catchUp(t, now)
	took := false
	tctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	err := w.retryStale(func() error {
		return pgx.BeginFunc(tctx, w.eng, func(tx pgx.Tx) error {
			took = false
			_, err := w.qon(tx).PeriodicAdvance(tctx, gen.PeriodicAdvanceParams{Name: p.name, Tick: &t, NextRunAt: next,
				Enqueue: enqueue, Missed: dropped})
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			took = true
			if !enqueue {
				return nil
			}
			return w.enqueueTick(tctx, tx, p, Tick{Name: p.name, At: latest, Missed: missed})
		})
	})
	if err != nil {
		return false, err
	}
	// Counted once committed: a transaction that failed at COMMIT enqueued and skipped nothing.
	switch {
	case took && enqueue:
		w.m.periodicEnqueued.Add(1)
	case took:
		w.m.periodicSkipped.Add(dropped)
	}
	if took && missed > 0 {
		w.log.Info("tenure: periodic schedule caught up after missed ticks", "schedule", p.name,
			"missed", missed, "enqueued", enqueue, "tick", latest)
	}
	return took, nil
}

// reregisterPeriodic writes the rows of this worker's schedules that rows lacks.
func (w *Worker) reregisterPeriodic(ctx context.Context, rows []*gen.PeriodicDueRow, byName map[string]*PeriodicJob) {
	have := make(map[string]bool, len(rows))
	for _, r := range rows {
		have[r.Name] = true
	}
	rctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	now, err := w.q.DatabaseNow(rctx)
	for name, p := range byName {
		if err == nil && !have[name] {
			err = w.upsertPeriodic(rctx, w.q, p, now)
		}
	}
	if err != nil && ctx.Err() == nil {
		w.m.periodicErrors.Add(1)
		w.engineError(&w.periodicLog, "periodic", err)
	}
}
