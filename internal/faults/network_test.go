package faults_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestNetworkCut (scenario 4): a worker reaches PostgreSQL only through an in-test TCP proxy
// (its handlers' pool and, derived from it, the engine's pool and LISTEN session); the test
// enqueues directly. (a) "cut-healed": every connection reset, new ones refused for 2 s, then
// restored. (b) "half-open": a silent partition (bytes swallowed, no RST/FIN) for 20 s, then
// healed as a middlebox that lost its state: the old connections are half-open (the LISTEN
// session, which never writes, is not told). Asserted: background jobs running through the
// fault all end succeeded, nothing stuck, and NOTIFY pickup latency is back to its pre-fault
// level (3 consecutive pickups within max(3 x median, median + 50ms)) within 5 s of the heal.
func TestNetworkCut(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		name   string
		outage time.Duration
	}{{"cut-healed", 2 * time.Second}, {"half-open", 20 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			c := newClient(t, pool)
			pc := pool.Config().ConnConfig
			proxy := newNetProxy(t, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
			wcfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
			require.NoError(t, err)
			wcfg.ConnConfig.Host, wcfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.addr().Port)
			wcfg.ConnConfig.Fallbacks, wcfg.ConnConfig.TLSConfig = nil, nil
			wcfg.ConnConfig.ConnectTimeout = 2 * time.Second
			wcfg.MaxConns = 4
			wpool, err := pgxpool.NewWithConfig(ctx, wcfg)
			require.NoError(t, err)
			t.Cleanup(wpool.Close)

			probe := newPickupProbe(c)
			w, err := worker.New(wpool, &worker.Config{
				Queues:         map[string]worker.QueueConfig{"default": {Concurrency: 2}, "bg": {Concurrency: 4}},
				Logger:         testLogger(),
				ReclaimEvery:   100 * time.Millisecond,
				StuckGrace:     200 * time.Millisecond,
				FinishRetryMax: 200 * time.Millisecond,
			})
			require.NoError(t, err)
			worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error {
				if job.Args.N < 0 {
					time.Sleep(200 * time.Millisecond)
					return nil
				}
				probe.handlerStarted(job.Args.N)
				return nil
			}, &worker.HandlerOptions{Retry: fastRetry})
			startWorker(t, w)

			pre, ids := probe.baseline(t, 10, 150*time.Millisecond)
			preMed := median(pre)
			bg := insertN(t, c, 200, func(i int) any { return faultArgs{N: -1 - i} }, &jobs.InsertOpts{Queue: "bg", Lease: 3 * time.Second})
			ids = append(ids, bg...)
			waitFor(t, 10*time.Second, "background jobs running", func() bool { return w.Stats().Running >= 4 })

			switch tc.name {
			case "cut-healed":
				proxy.cut()
				time.Sleep(tc.outage) // the outage itself, not an assertion
				proxy.restore()
			case "half-open":
				proxy.blackhole()
				time.Sleep(tc.outage)
				proxy.heal()
			}
			healed := time.Now()
			bound := max(3*preMed, preMed+50*time.Millisecond)
			rec, pids, lats, ok := probe.recovered(healed, 12*time.Second, bound, 3, 100*time.Millisecond)
			ids = append(ids, pids...)
			t.Logf("pickup median before %v; pickups after the heal (bound %v): %s", preMed, bound, fmtDurs(lats))

			drained := tryFor(25*time.Second, func() bool { return countStates(ctx, pool)["succeeded"] == len(ids) })
			drain := time.Since(healed)
			tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
			st := w.Stats()
			recovery := ms(rec)
			if !ok {
				recovery = ">12s(notify-not-back)"
			}
			result(t, "network-"+tc.name, tl, recovery, "outage="+ms(tc.outage), "drain_after_heal="+ms(drain),
				"listener_reconnects="+strconv.FormatInt(st.ListenerReconnects, 10),
				"finish_retries="+strconv.FormatInt(st.FinishRetries, 10), "reclaimed="+strconv.FormatInt(st.Reclaimed, 10))
			require.True(t, drained, "jobs did not all succeed within 25 s of the heal: %v", countStates(ctx, pool))
			require.True(t, ok && rec <= 5*time.Second,
				"NOTIFY pickup latency not back within 5 s of the heal (recovered=%t after %v): the LISTEN connection did not notice it was dead", ok, rec)
		})
	}
}
