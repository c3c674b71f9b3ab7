package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

// This file is the periodic service: the engine's side of periodic jobs (worker.PeriodicJob,
// Config.Periodic; the schedules' tick grid and catch-up decision are periodic.go's Ticks).
// Each tick is enqueued once across workers, in the transaction that advances the schedule's
// row.

// Periodic is one periodic schedule as the engine runs it (a validated worker.PeriodicJob).
type Periodic struct {
	Name, Kind string
	Spec       string // the schedule's text (worker.Schedule.String), stored on its row
	Ticks      Ticks
	// CatchUpOnce: ticks missed while no worker could enqueue them enqueue one job
	// (worker.CatchUpOnce); else they are dropped (worker.CatchUpSkip).
	CatchUpOnce  bool
	MisfireGrace time.Duration
	RunOnStart   bool
	Jitter       time.Duration
	Insert       *jobs.InsertOpts
	// Args builds the tick's job's args (worker.NewPeriodicJob's args function).
	Args func(ctx context.Context, t Tick) (generics.Args, error)
}

// Tick is one tick of a schedule (worker.Tick).
type Tick struct {
	Name    string
	At      time.Time
	Missed  int
	OnStart bool
}

// CatchUp decides what to do with p's stored tick t at database time now (Ticks.CatchUp),
// under p's catch-up policy and MisfireGrace.
func (p *Periodic) CatchUp(t, now time.Time) (latest time.Time, missed int, next time.Time, enqueue bool, dropped int64) {
	return p.Ticks.CatchUp(t, now, p.CatchUpOnce, p.MisfireGrace)
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
func (w *Engine) registerPeriodic(ctx context.Context) error {
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
		if !p.RunOnStart {
			continue
		}
		if err := w.runOnStart(ctx, p); err != nil {
			return fmt.Errorf("periodic %q: run on start: %w", p.Name, err)
		}
	}
	return nil
}

// upsertPeriodic writes p's row (see PeriodicUpsert) with now, the database's time.
func (w *Engine) upsertPeriodic(ctx context.Context, q *gen.Queries, p *Periodic, now time.Time) error {
	queue := jobs.DefaultQueue
	if p.Insert != nil && p.Insert.Queue != "" {
		queue = p.Insert.Queue
	} else if info, ok := w.reg.Lookup(p.Kind); ok && info.Defaults.Queue != "" {
		queue = info.Defaults.Queue
	}
	_, err := q.PeriodicUpsert(ctx, gen.PeriodicUpsertParams{Name: p.Name, Spec: p.Spec, Kind: p.Kind,
		Queue: queue, NextRunAt: p.Ticks.Next(now)})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) { // no row: unchanged
		return fmt.Errorf("periodic %q: %w", p.Name, err)
	}
	return nil
}

func (w *Engine) runOnStart(ctx context.Context, p *Periodic) error {
	enqueued := false
	err := w.inTx(ctx, func(tx pgx.Tx) error {
		q := w.qon(tx)
		at, err := q.PeriodicRunOnStart(ctx, gen.PeriodicRunOnStartParams{Name: p.Name, GapUs: p.Ticks.Period(time.Now()).Microseconds()})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // a job was enqueued within the period
		}
		if err != nil {
			return err
		}
		enqueued = true
		return w.enqueueTick(ctx, tx, p, Tick{Name: p.Name, At: *at, OnStart: true})
	})
	if err == nil && enqueued {
		w.m.PeriodicEnqueued.Add(1) // counted once committed
	}
	return err
}

// enqueueTick builds and inserts the tick's job in tx and records its id on the schedule. The
// caller counts it once tx has committed.
func (w *Engine) enqueueTick(ctx context.Context, tx pgx.Tx, p *Periodic, t Tick) error {
	args, err := p.Args(ctx, t)
	if err != nil {
		return fmt.Errorf("args: %w", err)
	}
	var o jobs.InsertOpts
	if p.Insert != nil {
		o = *p.Insert
	}
	o.RunAt = t.At
	if p.Jitter > 0 {
		o.RunAt = o.RunAt.Add(time.Duration(rand.Int64N(int64(p.Jitter))))
	}
	row, err := w.client.InsertTx(ctx, tx, args, &o)
	if err != nil {
		return err
	}
	return w.qon(tx).PeriodicSetJob(ctx, gen.PeriodicSetJobParams{JobID: &row.Job.ID, Name: p.Name})
}

// periodicService enqueues the ticks of this worker's schedules. It sleeps until the earliest
// next tick (at most periodicPollMax, measured from the database clock), then for each due
// schedule tries to move it to its next tick and enqueue the job in one transaction.
func (w *Engine) periodicService(ctx context.Context) {
	if len(w.periodic) == 0 {
		return
	}
	names := make([]string, len(w.periodic))
	byName := make(map[string]*Periodic, len(w.periodic))
	for i, p := range w.periodic {
		names[i], byName[p.Name] = p.Name, p
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
			w.m.PeriodicErrors.Add(1)
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
				w.m.PeriodicErrors.Add(1)
				w.engineError(&w.periodicLog, "periodic", err, "schedule", p.Name)
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
func (w *Engine) fireTick(ctx context.Context, p *Periodic, t, now time.Time) (bool, error) {
	latest, missed, next, enqueue, dropped := p.CatchUp(t, now)
	took := false
	tctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	err := w.retryStale(func() error {
		return w.inTx(tctx, func(tx pgx.Tx) error {
			took = false
			_, err := w.qon(tx).PeriodicAdvance(tctx, gen.PeriodicAdvanceParams{Name: p.Name, Tick: &t, NextRunAt: next,
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
			return w.enqueueTick(tctx, tx, p, Tick{Name: p.Name, At: latest, Missed: missed})
		})
	})
	if err != nil {
		return false, err
	}
	// Counted once committed: a transaction that failed at COMMIT enqueued and skipped nothing.
	switch {
	case took && enqueue:
		w.m.PeriodicEnqueued.Add(1)
	case took:
		w.m.PeriodicSkipped.Add(dropped)
	}
	if took && missed > 0 {
		w.log.Info("tenure: periodic schedule caught up after missed ticks", "schedule", p.Name,
			"missed", missed, "enqueued", enqueue, "tick", latest)
	}
	return took, nil
}

// reregisterPeriodic writes the rows of this worker's schedules that rows lacks.
func (w *Engine) reregisterPeriodic(ctx context.Context, rows []*gen.PeriodicDueRow, byName map[string]*Periodic) {
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
		w.m.PeriodicErrors.Add(1)
		w.engineError(&w.periodicLog, "periodic", err)
	}
}
