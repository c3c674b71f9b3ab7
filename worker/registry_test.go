package worker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestWorkerRegistry: workers register and refresh their rows; a graceful stop deletes the
// row; a killed worker's row stays until it expires, then another worker ages it out.
func TestWorkerRegistry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const every = 200 * time.Millisecond // the TTL (6 intervals) must outlast a loaded machine's stalls
	mk := func(id string, queues map[string]worker.QueueConfig) *worker.Worker {
		cfg := fastConfig(queues)
		cfg.ID, cfg.RegistryEvery = id, every
		w, err := worker.New(pool, cfg)
		require.NoError(t, err)
		worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
		return w
	}
	a := mk("worker-a", map[string]worker.QueueConfig{"default": {Concurrency: 4}, "mail": {Concurrency: 2}})
	b := mk("worker-b", nil)
	k := mk("worker-killed", nil)
	worker.SkipDeregister(k)
	c := newClient(t, pool, a)
	_, err := c.InsertMany(ctx, []jobs.InsertManyParams{{Args: noopArgs{N: 1}}, {Args: noopArgs{N: 2}}})
	require.NoError(t, err)
	for _, w := range []*worker.Worker{a, b, k} {
		startWorker(t, w)
	}

	ids := func() []string {
		ws, err := c.Workers(ctx)
		require.NoError(t, err)
		out := []string{}
		for _, w := range ws {
			out = append(out, w.ID)
		}
		return out
	}
	waitFor(t, 5*time.Second, "three registered workers", func() bool { return len(ids()) == 3 })
	waitFor(t, 5*time.Second, "jobs done", func() bool { return countState(t, pool, "succeeded") == 2 })

	// Rows are refreshed: heartbeats move, counters and last success arrive.
	first, err := c.Workers(ctx)
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "a heartbeat newer than the first read, with counters", func() bool {
		ws, err := c.Workers(ctx)
		require.NoError(t, err)
		var succ int64
		for _, w := range ws {
			succ += w.Counters["succeeded"]
		}
		return ws[0].HeartbeatAt.After(first[0].HeartbeatAt) && succ == 2
	})
	ws, err := c.Workers(ctx)
	require.NoError(t, err)
	wa := ws[0]
	require.Equal(t, "worker-a", wa.ID)
	require.Equal(t, map[string]jobs.WorkerQueue{"default": {Concurrency: 4}, "mail": {Concurrency: 2}}, wa.Queues)
	require.Equal(t, os.Getpid(), wa.PID)
	require.NotEmpty(t, wa.Host)
	require.NotEmpty(t, wa.Version)
	require.False(t, wa.Expired)
	require.Less(t, wa.HeartbeatAge, time.Second)
	require.WithinDuration(t, wa.HeartbeatAt.Add(worker.RegistryTTLIntervals*every), wa.ExpiresAt, 50*time.Millisecond)
	require.False(t, wa.StartedAt.After(wa.HeartbeatAt))
	require.Contains(t, wa.Counters, "claimed")

	// Graceful stop: the row is gone by the time Stop returns.
	require.NoError(t, stopWorker(t, b, 5*time.Second))
	require.Equal(t, []string{"worker-a", "worker-killed"}, ids())

	// A killed worker: its row stays (not expired yet)...
	require.NoError(t, stopWorker(t, k, 5*time.Second))
	require.Equal(t, []string{"worker-a", "worker-killed"}, ids())
	// ...until it expires (pretend time passed), when worker-a's next heartbeat deletes it.
	_, err = pool.Exec(ctx, `UPDATE tenure.workers SET heartbeat_at = now() - interval '1 hour',
		expires_at = now() - interval '1 second' WHERE id = 'worker-killed'`)
	require.NoError(t, err)
	ws, err = c.Workers(ctx)
	require.NoError(t, err)
	require.True(t, ws[1].Expired)
	require.Greater(t, ws[1].HeartbeatAge, 59*time.Minute)
	waitFor(t, 5*time.Second, "the expired row aged out", func() bool {
		got := ids()
		return len(got) == 1 && got[0] == "worker-a"
	})

	// A worker whose own row was aged out (a long partition) registers again.
	_, err = pool.Exec(ctx, `DELETE FROM tenure.workers`)
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "worker-a registered again", func() bool { return len(ids()) == 1 })

	require.NoError(t, stopWorker(t, a, 5*time.Second))
	require.Empty(t, ids())
}

// TestWorkerRegistryDisabled: a negative RegistryEvery writes nothing.
func TestWorkerRegistryDisabled(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	cfg := fastConfig(nil)
	cfg.RegistryEvery = -1
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	startWorker(t, w)
	time.Sleep(100 * time.Millisecond)
	ws, err := newClient(t, pool, w).Workers(context.Background())
	require.NoError(t, err)
	require.Empty(t, ws)
}
