package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/internal/logkey"
)

// listenService holds one connection in LISTEN on the new-job channel (payload: a queue name,
// sent by the insert statements inside the inserting transaction) and the cancel channel
// (payload: a job id), and the queue state channel (payload: a queue an operator paused or
// resumed; forwarded to the queue state service), and the await channel (payload: ids of jobs a
// jobs.Client waits for; forwarded to the finish batcher, which writes their finishes without
// lingering: finish.go). The connection is taken out of the engine pool (Hijack) and closed by
// this service alone. It proves it is alive: after listenIdle without a notification it pings
// with a deadline, so a half-open connection (a network that drops packets without a reset)
// is found within listenIdle + listenPingTimeout and replaced. A broken connection is replaced
// with backoff; after every (re)connect all queues are woken, and every running job is
// heartbeated at once (which also reports cancel requests), since notifications sent meanwhile
// are lost. Polling stays the authority either way.
func (w *Engine) listenService(ctx context.Context) {
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := w.listenOnce(ctx, func() {
			backoff = 100 * time.Millisecond
			if !first {
				w.m.ListenerReconnects.Add(1)
				w.log.Info("tenure: listener reconnected")
			}
			first = false
			for _, q := range w.queues {
				q.wake()
				signal(q.resyncCh)
			}
			signal(w.queueStateCh) // pauses sent meanwhile were missed

		})
		if ctx.Err() != nil {
			return
		}
		if ok, n := w.listenLog.Allow(time.Now()); ok { // at most one line per ErrorLogEvery
			attrs := []any{logkey.Err, err, "retry_in", backoff}
			if n > 0 {
				attrs = append(attrs, logkey.NotLogged, n)
			}
			w.log.Warn("tenure: listener connection lost; polling continues (repeats are logged at most every "+ErrorLogEvery.String()+")", attrs...)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, listenRetryMax)
	}
}

// Listener liveness: wait this long for a notification before pinging, and give the ping
// (and the connect + LISTEN) this long to answer.
const (
	listenIdle        = 5 * time.Second
	listenPingTimeout = 3 * time.Second
	// listenRetryMax caps the wait between reconnect attempts: after an outage heals, NOTIFY
	// wake-ups are back within about this long (polling covers the gap). An attempt costs one
	// connection; the fault matrix's half-open case bounds the recovery at 5 s.
	listenRetryMax = 2 * time.Second
)

func (w *Engine) listenOnce(ctx context.Context, connected func()) error {
	cctx, cancel := context.WithTimeout(ctx, listenPingTimeout+2*time.Second)
	defer cancel()
	pc, err := w.eng.Acquire(cctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // a LISTENing session must never go back to the pool
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	// The schema's channels (tenure_jobs, tenure_cancel, tenure_queues for the default schema;
	// internal/dbschema): a worker never hears another schema's inserts, pauses or cancels.
	jobsCh, cancelCh, queuesCh, awaitCh := w.sch.JobsChannel(), w.sch.CancelChannel(), w.sch.QueuesChannel(), w.sch.AwaitChannel()
	if _, err := conn.Exec(cctx, "LISTEN "+jobsCh+"; LISTEN "+cancelCh+"; LISTEN "+queuesCh+"; LISTEN "+awaitCh); err != nil {
		return err
	}
	connected()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed() {
				return err
			}
			if err := ping(ctx, conn); err != nil {
				return err
			}
			continue
		}
		switch n.Channel {
		case jobsCh:
			name, prio, runAt, hinted := ParseJobsPayload(n.Payload)
			if q := w.queues[name]; q != nil {
				if hinted {
					q.hintDue(prio, runAt)
				} else {
					q.plainNotified.Store(true)
				}
				q.wake()
			}
		case queuesCh:
			if _, ok := w.queues[n.Payload]; ok {
				signal(w.queueStateCh)
			}
		case awaitCh:
			if ids := ParseIDs(n.Payload); len(ids) > 0 {
				select {
				case w.awaitCh <- ids:
				default: // the batcher is far behind: these finishes linger, nothing else
				}
			}
		case cancelCh:
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				for _, q := range w.queues {
					select {
					case q.cancelCh <- id:
					default: // the loop is busy: the next heartbeat reports the request anyway
					}
				}
			}
		}
	}
}

func ping(ctx context.Context, conn *pgx.Conn) error {
	pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
	defer cancel()
	return conn.Ping(pctx)
}
