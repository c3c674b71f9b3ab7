package engine

import (
	"context"
	"slices"
	"time"
)

// Queue pause (jobs.Client.PauseQueue / ResumeQueue): the paused set lives in tenure.queues.
// The queue state service is its only reader in the worker: it reads the paused set of this
// worker's queues at Start (before any loop claims), on every NOTIFY tenure_queues (the
// listener forwards it on queueStateCh), after every listener reconnect, and every
// QueueStateEvery as a backstop, and sends each loop its queue's state on the loop's pauseCh.
// The loop owns its paused flag: while it is set, the loop starts no claim (claims already in
// flight complete, and running jobs finish normally).

// pausedQueues reads which of this worker's queues are paused.
func (w *Engine) pausedQueues(ctx context.Context) (map[string]bool, error) {
	names := make([]string, 0, len(w.queues))
	for name := range w.queues {
		names = append(names, name)
	}
	slices.Sort(names)
	rows, err := w.q.PausedQueues(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(rows))
	for _, n := range rows {
		out[n] = true
	}
	return out, nil
}

// queueStateService keeps the loops' paused flags in line with tenure.queues.
func (w *Engine) queueStateService(ctx context.Context) {
	t := w.clk.NewTicker(w.cfg.QueueStateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.queueStateCh:
		case <-t.C():
		}
		qctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
		var paused map[string]bool
		err := w.retryStale(func() (err error) {
			paused, err = w.pausedQueues(qctx)
			return err
		})
		cancel()
		w.queueStateReads.Add(1)
		if err != nil {
			if ctx.Err() == nil {
				w.engineError(&w.pauseLog, "queue state", err)
			}
			continue
		}
		for name, q := range w.queues {
			q.setPaused(paused[name])
		}
	}
}

// QueueStateReads returns how many reads of the paused queues the queue state service has
// made (not counting Start's): tests wait for the one that follows the listener's LISTEN.
func (w *Engine) QueueStateReads() int64 { return w.queueStateReads.Load() }

// setPaused hands the loop its queue's state (the latest one wins; never blocks). The
// service is the only sender.
func (q *queue) setPaused(p bool) {
	for {
		select {
		case q.pauseCh <- p:
			return
		default:
		}
		select { // replace a state the loop has not taken yet
		case <-q.pauseCh:
		default:
		}
	}
}

// pauseChanged is the loop taking a new paused state. On resume every idle claimer is
// woken, so claiming starts again at once.
func (q *queue) pauseChanged(p bool) {
	if p == q.paused {
		return
	}
	q.paused = p
	q.pausedFlag.Store(p)
	if p {
		q.w.log.Info("tenure: queue paused: no new claims; running jobs finish", "queue", q.name)
		return
	}
	q.w.log.Info("tenure: queue resumed", "queue", q.name)
	q.wmForce = true // the first claim after a pause scans every band from its start
	for i := range q.claimers {
		if c := &q.claimers[i]; !c.busy {
			c.sleepUntil, c.idle = time.Time{}, 0
		}
	}
}
