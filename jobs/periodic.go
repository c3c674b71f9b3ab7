package jobs

import (
	"context"
	"time"
)

// PeriodicSchedule is one row of tenure.periodic: a schedule some worker registered
// (worker.Config.Periodic) and its bookkeeping. Rows outlive the configuration that created
// them: a schedule removed from every worker stays listed, ever more Overdue (delete its row
// from tenure.periodic to drop it; a worker that still lists it writes it again).
type PeriodicSchedule struct {
	Name string
	// Spec is the schedule as the last registering worker described it ("cron */5 * * * *
	// Europe/Berlin", "every 1s"); Kind and Queue are the job it enqueues.
	Spec, Kind, Queue string
	// NextRunAt is the next tick: its job is enqueued once the database clock reaches it.
	NextRunAt time.Time
	// LastTickAt is the tick of the last enqueued job (or of the last tick dropped under
	// CatchUpSkip); LastEnqueuedAt is when a job was last enqueued (database clock), LastJobID
	// its id.
	LastTickAt, LastEnqueuedAt *time.Time
	LastJobID                  *int64
	// Missed counts ticks that got no job of their own: folded into a catch-up job
	// (worker.CatchUpOnce) or dropped (worker.CatchUpSkip) after every worker was down.
	Missed int64
	// CreatedAt is when the schedule was first registered, UpdatedAt its last change.
	CreatedAt, UpdatedAt time.Time
	// Overdue is how far the database clock is past NextRunAt (0 when it is not due yet): more
	// than a few seconds means no running worker has the schedule.
	Overdue time.Duration
}

// Periodic lists the periodic schedules, ordered by name. It reads one small table.
func (c *Client) Periodic(ctx context.Context) ([]PeriodicSchedule, error) {
	rows, err := c.q.ListPeriodic(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]PeriodicSchedule, len(rows))
	for i, r := range rows {
		out[i] = PeriodicSchedule{Name: r.Name, Spec: r.Spec, Kind: r.Kind, Queue: r.Queue, NextRunAt: r.NextRunAt,
			LastTickAt: r.LastTickAt, LastEnqueuedAt: r.LastEnqueuedAt, LastJobID: r.LastJobID, Missed: r.Missed,
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Overdue: max(r.DbNow.Sub(r.NextRunAt), 0)}
	}
	return out, nil
}
