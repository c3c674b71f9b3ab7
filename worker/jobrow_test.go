package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestHandlerAndOutcomeSeeTheClaimedRow: the row a handler's Job embeds, the one middleware
// receives and the Outcome's Job are one row, the attempt as claimed: its ID, Attempt,
// Generation, ClaimToken, LockedBy, LockedUntil and AttemptedAt are what the database holds
// while the attempt runs, on a first attempt and on a retry.
func TestHandlerAndOutcomeSeeTheClaimedRow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()

	type stored struct {
		attempt     int
		generation  int64
		token       *uuid.UUID
		lockedBy    *string
		lockedUntil *time.Time
		attemptedAt *time.Time
		state       string
	}
	type attempt struct {
		mw, handler *generics.JobRow
		db          stored
	}
	var mu sync.Mutex
	var attempts []attempt
	var outcomes []worker.Outcome

	cfg := fastConfig(nil)
	cfg.OnOutcome = func(o worker.Outcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }
	var mwSeen *generics.JobRow
	cfg.Middleware = []worker.Middleware{func(next worker.HandlerFunc) worker.HandlerFunc {
		return func(ctx context.Context, job *generics.JobRow) error {
			mu.Lock()
			mwSeen = job
			mu.Unlock()
			return next(ctx, job)
		}
	}}
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[failArgs]) error {
		var s stored
		var attempts32 int32
		err := pool.QueryRow(ctx, `SELECT attempts, generation, claim_token, locked_by, locked_until, attempted_at, state::text
FROM tenure.jobs WHERE id = $1`, job.ID).Scan(&attempts32, &s.generation, &s.token, &s.lockedBy, &s.lockedUntil, &s.attemptedAt, &s.state)
		if err != nil {
			return err
		}
		s.attempt = int(attempts32)
		mu.Lock()
		attempts = append(attempts, attempt{mw: mwSeen, handler: job.JobRow, db: s})
		mu.Unlock()
		if job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, &worker.HandlerOptions{MaxAttempts: 3, Retry: fastRetry})
	c := newClient(t, pool, w)
	res, err := c.Insert(ctx, failArgs{Msg: "x"}, &jobs.InsertOpts{Tags: []string{"t"}})
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "two outcomes", func() bool { mu.Lock(); defer mu.Unlock(); return len(outcomes) == 2 })

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, attempts, 2)
	for i, a := range attempts {
		o := outcomes[i]
		require.Same(t, a.handler, a.mw, "attempt %d: middleware and handler share the row", i+1)
		require.Same(t, a.handler, o.Job, "attempt %d: the outcome carries the handler's row", i+1)
		row := a.handler
		require.Equal(t, res.Job.ID, row.ID)
		require.Equal(t, "fail", row.Kind)
		require.Equal(t, []string{"t"}, row.Tags)
		require.JSONEq(t, `{"msg": "x"}`, string(row.Payload))
		require.Equal(t, generics.JobStateRunning, row.State)
		require.Equal(t, "running", a.db.state)
		require.Equal(t, i+1, row.Attempt)
		require.Equal(t, a.db.attempt, row.Attempt)
		require.Equal(t, a.db.generation, row.Generation)
		require.NotNil(t, row.ClaimToken)
		require.Equal(t, a.db.token, row.ClaimToken)
		require.Equal(t, a.db.lockedBy, &row.LockedBy)
		require.Equal(t, w.ID(), row.LockedBy)
		require.True(t, a.db.attemptedAt.Equal(*row.AttemptedAt))
		// The row's lease is the claim's: the claim sets locked_until to its now() + the lease
		// and attempted_at to the same now(). The stored lease may already be later, since a
		// heartbeat (the listener's first connect heartbeats every running job at once) can
		// run before the handler reads it; it is never earlier.
		require.True(t, row.AttemptedAt.Add(row.Lease).Equal(*row.LockedUntil),
			"attempt %d: locked_until %v is attempted_at %v + lease %v", i+1, *row.LockedUntil, *row.AttemptedAt, row.Lease)
		require.False(t, a.db.lockedUntil.Before(*row.LockedUntil), "attempt %d: stored lease earlier than the claim's", i+1)
	}
	require.Equal(t, worker.OutcomeRetried, outcomes[0].Transition)
	require.Equal(t, worker.OutcomeSucceeded, outcomes[1].Transition)
	require.NotEqual(t, *attempts[0].handler.ClaimToken, *attempts[1].handler.ClaimToken)
	require.Equal(t, attempts[0].handler.Generation+1, attempts[1].handler.Generation)
}
