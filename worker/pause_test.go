package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// pauseWorker is a worker on its own pool running noop jobs that take 100 ms.
func pauseWorker(t testing.TB, pool *pgxpool.Pool, id string, stateEvery time.Duration) *worker.Worker {
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4}, "other": {Concurrency: 2}})
	cfg.ID = id
	cfg.QueueStateEvery = stateEvery
	cfg.RegistryEvery = 100 * time.Millisecond
	w, err := worker.New(ownPool(t, pool), cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, _ *generics.Job[noopArgs]) error {
		select {
		case <-time.After(100 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil)
	return w
}

// TestPauseQueueClusterWide: two workers (one relying on the NOTIFY alone: its poll is an
// hour) drain a queue; PauseQueue stops every claim from it once each worker saw the pause
// (only claims already in flight land after that), running jobs finish normally, the other
// queue keeps flowing; a worker started while the queue is paused claims nothing from it;
// ResumeQueue lets all of them claim again. Pause and resume are audited and visible in Stats, the registry and ListQueues.
func TestPauseQueueClusterWide(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c := newClient(t, pool, nil)
	batch := func(queue string, n int) {
		ps := make([]jobs.InsertManyParams, n)
		for i := range ps {
			ps[i] = jobs.InsertManyParams{Args: noopArgs{N: i}, Opts: &jobs.InsertOpts{Queue: queue}}
		}
		_, err := c.InsertMany(ctx, ps)
		require.NoError(t, err)
	}
	batch("default", 400)
	batch("other", 400)
	a := pauseWorker(t, pool, "pause-a", time.Hour) // NOTIFY only
	b := pauseWorker(t, pool, "pause-b", 0)         // NOTIFY and the 1 s poll
	startWorker(t, a)
	startWorker(t, b)
	waitFor(t, 10*time.Second, "work flowing", func() bool { return a.Stats().Succeeded > 5 && b.Stats().Succeeded > 5 })

	act := jobs.Action{Actor: "ops@example.com", Reason: "maintenance of the mail relay"}
	out, err := c.PauseQueue(ctx, "default", act)
	require.NoError(t, err)
	require.Equal(t, jobs.QueuePaused, out)
	var pausedAt time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT paused_at FROM tenure.queues WHERE name = 'default'").Scan(&pausedAt))
	otherBefore := countQueueState(t, pool, "other", "succeeded")
	// Both workers learn of the pause (a by the NOTIFY alone); how soon is pace, not asserted.
	waitFor(t, 30*time.Second, "both workers to see the pause", func() bool {
		return slices.Equal(a.Stats().PausedQueues, []string{"default"}) && slices.Equal(b.Stats().PausedQueues, []string{"default"})
	})
	var seenAt time.Time // database clock, after both saw it
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&seenAt))
	require.False(t, seenAt.Before(pausedAt))
	waitFor(t, 30*time.Second, "running jobs to finish", func() bool { return countQueueState(t, pool, "default", "running") == 0 })
	// A window in which a worker that ignored the pause would claim (they claim every few ms
	// while ready jobs wait): the scenario, not a pace.
	time.Sleep(time.Second)
	// A claim already in flight when its worker saw the pause may still land (claims do not
	// read the pause): at most the worker's free slots, 4 each. A worker that went on claiming
	// would take about 40 a second.
	var after int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE queue = 'default' AND attempted_at >= $1", seenAt).Scan(&after))
	require.LessOrEqual(t, after, 2*4, "%d jobs claimed after both workers saw the pause", after)
	require.Zero(t, countQueueState(t, pool, "default", "running"), "running jobs finished")
	for _, w := range []*worker.Worker{a, b} {
		st := w.Stats()
		require.Equal(t, []string{"default"}, st.PausedQueues)
		require.Zero(t, st.Released, "nothing was interrupted")
	}
	readyWhilePaused := countQueueState(t, pool, "default", "ready")
	var quietAt time.Time // database clock: the queue is quiet from here until the resume
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&quietAt))
	require.Positive(t, readyWhilePaused)
	require.Greater(t, countQueueState(t, pool, "other", "succeeded"), otherBefore, "other queues keep flowing")

	// Visible: registry, ListQueues; a second pause changes nothing but is audited.
	waitFor(t, 5*time.Second, "registry shows the pause", func() bool {
		ws, err := c.Workers(ctx)
		require.NoError(t, err)
		n := 0
		for _, w := range ws {
			if w.Queues["default"].Paused && !w.Queues["other"].Paused {
				n++
			}
		}
		if n != 2 {
			return false
		}
		// ListQueues counts live registry rows: under load a registry heartbeat can land
		// after its row's expiry, so wait until both workers count again.
		qs, err := c.ListQueues(ctx)
		require.NoError(t, err)
		return len(qs) == 2 && qs[0].Workers == 2 && qs[1].Workers == 2
	})
	out, err = c.PauseQueue(ctx, "default", act)
	require.NoError(t, err)
	require.Equal(t, jobs.QueueUnchanged, out)
	qs, err := c.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 2)
	require.Equal(t, jobs.QueueState{Name: "default", Paused: true, PausedAt: &pausedAt, UpdatedBy: act.Actor, Reason: act.Reason,
		UpdatedAt: qs[0].UpdatedAt, Workers: 2}, qs[0])
	require.Equal(t, jobs.QueueState{Name: "other", Workers: 2}, qs[1])

	// A worker started while paused claims nothing from the queue (it has nothing else to do:
	// "other" is drained by then or not, but its default claims must stay zero).
	late := pauseWorker(t, pool, "pause-late", 0)
	startWorker(t, late)
	require.Equal(t, []string{"default"}, late.Stats().PausedQueues)
	time.Sleep(1500 * time.Millisecond)
	var lateClaims int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE queue = 'default' AND attempted_at > $1", quietAt).Scan(&lateClaims))
	require.Zero(t, lateClaims)
	require.Equal(t, readyWhilePaused, countQueueState(t, pool, "default", "ready"))

	out, err = c.ResumeQueue(ctx, "default", jobs.Action{Actor: "ops@example.com", Reason: "relay is back"})
	require.NoError(t, err)
	require.Equal(t, jobs.QueueResumed, out)
	waitFor(t, 30*time.Second, "drained after resume", func() bool { return countQueueState(t, pool, "default", "succeeded") == 400 })
	for _, w := range []*worker.Worker{a, b, late} {
		require.Empty(t, w.Stats().PausedQueues)
		require.Positive(t, w.Stats().Succeeded, w.ID())
	}
	var lateDefault int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE queue = 'default' AND attempted_at > $1", quietAt).Scan(&lateDefault))
	require.Equal(t, readyWhilePaused, lateDefault, "after the resume, exactly the jobs left ready were claimed")

	entries, err := c.Audit(ctx, 0, 0, 100)
	require.NoError(t, err)
	var actions []string
	for _, e := range entries {
		actions = append(actions, fmt.Sprintf("%s %s %s %s", e.Action, e.Actor, e.Reason, e.Detail))
	}
	require.Equal(t, []string{
		`pause ops@example.com maintenance of the mail relay {"queue": "default", "outcome": "paused"}`,
		`pause ops@example.com maintenance of the mail relay {"queue": "default", "outcome": "unchanged"}`,
		`resume ops@example.com relay is back {"queue": "default", "outcome": "resumed"}`,
	}, actions)
}

func countQueueState(t testing.TB, pool *pgxpool.Pool, queue, state string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.jobs WHERE queue = $1 AND state = $2", queue, state).Scan(&n))
	return n
}

// The poll is the backstop of the NOTIFY: a pause written without a notification (as if it was
// lost) is seen at the next QueueStateEvery tick, and so is the resume. The worker runs on a
// fake clock: the poll's tick comes when the test moves it, so seeing the pause proves the poll
// read it (how soon on a real clock is pace).
func TestPausePollBackstop(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const every = 200 * time.Millisecond
	w := pauseWorker(t, pool, "poller", every)
	clk := worker.UseFakeClock(w, time.Now())
	startWorker(t, w)
	// The listener's LISTEN is followed by a read of the paused queues (a pause notified
	// before LISTEN would be missed otherwise); wait for it, or it may see the row.
	waitFor(t, 30*time.Second, "the read after LISTEN", func() bool { return worker.QueueStateReads(w) >= 1 })
	_, err := pool.Exec(ctx, `INSERT INTO tenure.queues (name, paused, paused_at, updated_by, reason) VALUES ('other', true, now(), 'sql', 'no notify')`)
	require.NoError(t, err)
	require.Empty(t, w.Stats().PausedQueues, "no tick yet, no notification: not seen")
	clk.Advance(every)
	waitFor(t, 30*time.Second, "the poll to see the pause", func() bool { return len(w.Stats().PausedQueues) == 1 })
	require.Equal(t, []string{"other"}, w.Stats().PausedQueues)
	_, err = pool.Exec(ctx, `UPDATE tenure.queues SET paused = false, paused_at = NULL WHERE name = 'other'`)
	require.NoError(t, err)
	clk.Advance(every)
	waitFor(t, 30*time.Second, "the poll to see the resume", func() bool { return len(w.Stats().PausedQueues) == 0 })
}
