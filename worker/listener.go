package worker

import (
	"context"
	"strconv"
	"time"
)

// listenLoop holds one engine connection in LISTEN on the new-job channel (payload: a queue
// name, sent by the insert trigger on commit) and the cancel channel (payload: a job id). A
// broken connection is replaced with backoff; after every (re)connect all queues are woken,
// and every running job is heartbeated at once (which also reports cancel requests), since
// notifications sent meanwhile are lost. Polling stays the authority either way.
func (w *Worker) listenLoop() {
	defer w.bgWG.Done()
	backoff := 100 * time.Millisecond
	first := true
	for w.bg.Err() == nil {
		err := w.listenOnce(w.bg, func() {
			backoff = 100 * time.Millisecond
			if !first {
				w.m.listenerReconnects.Add(1)
			}
			first = false
			for _, q := range w.queues {
				q.wake()
			}
			// Cancel requests sent before this connection listened were missed: the next
			// heartbeat tick checks every running job at once instead of at its due time.
			w.heartbeatAll.Store(true)
		})
		if w.bg.Err() != nil {
			return
		}
		w.log.Warn("tenure: listener connection lost; polling continues", "err", err, "retry_in", backoff)
		select {
		case <-w.bg.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (w *Worker) listenOnce(ctx context.Context, connected func()) error {
	conn, err := w.eng.Acquire(ctx)
	if err != nil {
		return err
	}
	// A LISTENing session must not go back to the pool.
	defer func() { _ = conn.Conn().Close(context.Background()); conn.Release() }()
	if _, err := conn.Exec(ctx, "LISTEN tenure_jobs; LISTEN tenure_cancel"); err != nil {
		return err
	}
	connected()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case "tenure_jobs":
			if q := w.queues[n.Payload]; q != nil {
				q.wake()
			}
		case "tenure_cancel":
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				w.requestCancel(id)
			}
		}
	}
}
