package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
)

// QueueState is one queue as ListQueues reports it.
type QueueState struct {
	Name string
	// Paused reports that workers do not claim from the queue (PauseQueue); PausedAt is when
	// it was paused (nil when not paused).
	Paused   bool
	PausedAt *time.Time
	// UpdatedBy, Reason and UpdatedAt are the last pause or resume action ("" / nil when no
	// operator ever acted on the queue).
	UpdatedBy, Reason string
	UpdatedAt         *time.Time
	// Workers is the number of live registered workers (tenure.workers, not expired) that
	// serve the queue.
	Workers int
}

// PauseOutcome says what PauseQueue or ResumeQueue did.
type PauseOutcome string

const (
	// QueuePaused: the queue was running and is now paused.
	QueuePaused PauseOutcome = "paused"
	// QueueResumed: the queue was paused and is now running.
	QueueResumed PauseOutcome = "resumed"
	// QueueUnchanged: the queue already was in the asked state; the action is still audited
	// (the reason may matter) but changes nothing.
	QueueUnchanged PauseOutcome = "unchanged"
)

// PauseQueue pauses queue cluster-wide: no worker starts a claim from it once it has seen
// the change, which it does at once through a NOTIFY on channel tenure_queues (sent by this
// transaction, delivered on commit) and at the latest after its poll (worker.Config.
// QueueStateEvery, default 1 s). Jobs already running finish normally (they are not
// interrupted or released); enqueues into a paused queue are accepted and wait. The state is
// a row in tenure.queues, so it survives worker and database restarts, and workers started
// while the queue is paused do not claim from it. The action is audited (action "pause",
// detail {"queue": name}). It returns QueueUnchanged if the queue was already paused.
func (c *Client) PauseQueue(ctx context.Context, queue string, act Action) (PauseOutcome, error) {
	return c.setPaused(ctx, queue, true, act)
}

// ResumeQueue undoes PauseQueue: workers claim from the queue again as soon as they see the
// change (NOTIFY, else their poll). Audited (action "resume"). It returns QueueUnchanged if
// the queue was not paused.
func (c *Client) ResumeQueue(ctx context.Context, queue string, act Action) (PauseOutcome, error) {
	return c.setPaused(ctx, queue, false, act)
}

func (c *Client) setPaused(ctx context.Context, queue string, paused bool, act Action) (PauseOutcome, error) {
	if err := act.check(); err != nil {
		return "", err
	}
	if !ValidQueueName(queue) {
		return "", &OptionError{Field: "queue", Msg: fmt.Sprintf("%q is not a valid queue name", queue)}
	}
	action, out := "resume", QueueResumed
	if paused {
		action, out = "pause", QueuePaused
	}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.qtx(tx)
		prev, err := q.LockQueueState(ctx, queue)
		if err != nil {
			return err
		}
		was := len(prev) > 0 && prev[0]
		if was == paused {
			out = QueueUnchanged
		}
		if _, err := q.SetQueuePaused(ctx, gen.SetQueuePausedParams{Name: queue, Paused: paused, Actor: act.Actor, Reason: act.Reason}); err != nil {
			return err
		}
		if err := q.NotifyQueueState(ctx, queue); err != nil {
			return err
		}
		return audit(ctx, q, act, action, nil, map[string]any{"queue": queue, "outcome": out})
	})
	if err != nil {
		return "", err
	}
	c.log.InfoContext(ctx, "tenure: queue "+action, "queue", queue, "outcome", out, "actor", act.Actor, "reason", act.Reason)
	return out, nil
}

// ListQueues returns, ordered by name, every queue an operator paused or resumed and every
// queue a live registered worker serves, with its pause state. It reads two small tables.
func (c *Client) ListQueues(ctx context.Context) ([]QueueState, error) {
	rows, err := c.q.ListQueueStates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]QueueState, len(rows))
	for i, r := range rows {
		out[i] = QueueState{Name: r.Name, Paused: r.Paused, PausedAt: r.PausedAt, UpdatedAt: r.UpdatedAt, Workers: int(r.Workers)}
		if r.UpdatedBy != nil {
			out[i].UpdatedBy = *r.UpdatedBy
		}
		if r.Reason != nil {
			out[i].Reason = *r.Reason
		}
	}
	return out, nil
}
