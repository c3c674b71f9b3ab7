package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/worker"
)

type slowFinishArgs struct {
	N int `json:"n"`
}

func (slowFinishArgs) Kind() string        { return "slow_finish" }
func (slowFinishArgs) PayloadVersion() int { return 1 }

// TestFinishOutlastingItsDeadlineLands: a finish whose statement takes longer than the engine's
// per-statement deadline (a workflow root releasing 100,000 dependents took 5–8 s against a 10 s
// deadline; a slower server takes longer) must still land: each retry after a timeout gets a
// longer deadline. With a fixed deadline every try is cancelled, the finish is abandoned after
// maxFinishAttempts, the lease expires, the handler runs again, and so on for ever.
func TestFinishOutlastingItsDeadlineLands(t *testing.T) {
	for _, tc := range []struct {
		name string
		ride bool
	}{{"finishers", false}, {"riding on a claim", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			// Every finish of this kind's job takes 1 s in the database: twenty times the
			// deadline the test gives the engine's finishes, and twice the claims' once the job
			// runs (a claim it rides on runs out of time). Claims keep the default deadline
			// until then: a claim that runs out of time may still commit, and the job it owned
			// would come back only when its lease expires (attempt 2), which on a loaded machine
			// a 500 ms claim deadline makes likely.
			_, err := pool.Exec(ctx, `
CREATE FUNCTION public.slow_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$;
CREATE TRIGGER slow_finish BEFORE UPDATE ON tenure.jobs FOR EACH ROW
  WHEN (NEW.state <> 'running' AND NEW.kind = 'slow_finish') EXECUTE FUNCTION public.slow_finish();`)
			require.NoError(t, err)

			var runs atomic.Int32
			gate := make(chan struct{})
			outcomes := make(chan worker.Outcome, 1024)
			cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2}})
			cfg.OnOutcome = func(o worker.Outcome) { outcomes <- o }
			w, err := worker.New(pool, cfg)
			require.NoError(t, err)
			worker.SetStatementDeadlines(w, 0, 50*time.Millisecond)
			if !tc.ride {
				worker.NoRide(w)
			}
			worker.MustRegister(w, func(context.Context, *generics.Job[slowFinishArgs]) error {
				runs.Add(1)
				<-gate
				return nil
			}, nil)
			worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
			c := newClient(t, pool, w)
			res, err := c.Insert(ctx, slowFinishArgs{N: 1}, nil)
			require.NoError(t, err)
			if tc.ride {
				// Other jobs keep claims coming, so that the slow job's completion rides on one.
				for i := range 300 {
					_, err = c.Insert(ctx, noopArgs{N: i}, nil)
					require.NoError(t, err)
				}
			}
			startWorker(t, w)
			waitFor(t, 60*time.Second, "the slow job running", func() bool { return runs.Load() == 1 })
			if tc.ride {
				worker.SetStatementDeadlines(w, 500*time.Millisecond, 50*time.Millisecond)
			}
			close(gate)

			var got worker.Outcome
			waitFor(t, 90*time.Second, "the slow finish to land", func() bool {
				select {
				case o := <-outcomes:
					if o.Job.ID == res.Job.ID && o.Err == nil {
						got = o
						return true
					}
				default:
				}
				return false
			})
			require.Equal(t, worker.OutcomeSucceeded, got.Transition)
			var state string
			var attempts int
			require.NoError(t, pool.QueryRow(ctx, "SELECT state, attempts FROM tenure.jobs WHERE id = $1", res.Job.ID).Scan(&state, &attempts))
			require.Equal(t, "succeeded", state)
			require.Equal(t, 1, attempts, "the handler ran again: its finish never landed")
			require.Equal(t, int32(1), runs.Load())
		})
	}
}
