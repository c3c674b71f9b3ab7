package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestTerminateBackends (scenario 2): pg_terminate_backend of every connection of a worker
// (selected by application_name: the handlers' pool and the engine's private pool, the LISTEN
// session included) while background jobs run. Asserted: every job ends succeeded, the
// listener reconnected, and NOTIFY pickup latency (insert -> handler start on an idle queue)
// is back to its pre-fault level (3 consecutive pickups within max(3 x median, median + 50ms))
// within 5 s. Polling (100 ms -> 2 s) would give pickups of hundreds of ms.
func TestTerminateBackends(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	app := fmt.Sprintf("faults-term-%d", rand.IntN(1e9))
	wpool := openPool(t, withAppName(pool.Config().ConnString(), app), 6, "")
	c := newClient(t, pool)
	probe := newPickupProbe(c)

	cfg := &worker.Config{
		Queues:       map[string]worker.QueueConfig{"default": {Concurrency: 2}, "bg": {Concurrency: 4}},
		Logger:       testLogger(),
		ReclaimEvery: 100 * time.Millisecond,
		StuckGrace:   200 * time.Millisecond,
		// FetchPoll defaults (100 ms -> 2 s): pickups faster than that come from NOTIFY.
	}
	w, err := worker.New(wpool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error {
		if job.Args.N < 0 { // background job
			time.Sleep(300 * time.Millisecond)
			return nil
		}
		probe.handlerStarted(job.Args.N)
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	startWorker(t, w)

	pre, ids := probe.baseline(t, 15, 150*time.Millisecond)
	preMed := median(pre)
	t.Logf("pickup latency before the fault: median %v %s", preMed, fmtDurs(pre))
	bg := insertN(t, c, 80, func(i int) any { return faultArgs{N: -1 - i} }, &jobs.InsertOpts{Queue: "bg", Lease: 2 * time.Second})
	ids = append(ids, bg...)
	waitFor(t, 10*time.Second, "background jobs running", func() bool { return w.Stats().Running >= 4 })

	var killed, listeners int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)),
		count(*) FILTER (WHERE query ILIKE 'LISTEN%')
		FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed, &listeners))
	fault := time.Now()
	t.Logf("terminated %d backends (%d in LISTEN)", killed, listeners)
	require.GreaterOrEqual(t, killed, 3)
	require.Equal(t, 1, listeners, "the LISTEN session was among the terminated")

	bound := max(3*preMed, preMed+50*time.Millisecond)
	rec, pids, lats, ok := probe.recovered(fault, 10*time.Second, bound, 3, 100*time.Millisecond)
	ids = append(ids, pids...)
	t.Logf("pickups after the fault (bound %v): %s", bound, fmtDurs(lats))

	waitFor(t, 30*time.Second, "every job to succeed", func() bool { return countStates(ctx, pool)["succeeded"] == len(ids) })
	tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
	st := w.Stats()
	recovery := ms(rec)
	if !ok {
		recovery = ">10s"
	}
	result(t, "terminate-backends", tl, recovery, "terminated="+strconv.Itoa(killed), "pre_median="+ms(preMed),
		"listener_reconnects="+strconv.FormatInt(st.ListenerReconnects, 10), "stale="+strconv.FormatInt(st.StaleRejected, 10))
	require.True(t, ok && rec <= 5*time.Second, "NOTIFY pickup latency not back to its pre-fault median within 5 s (recovered=%t after %v)", ok, rec)
	require.GreaterOrEqual(t, st.ListenerReconnects, int64(1))
}
