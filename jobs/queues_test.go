package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// A client told its served queues refuses an insert into any other queue, whether the queue
// comes from the insert options or from the defaults, and writes nothing.
func TestInsertIntoUnknownQueueIsRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, &jobs.Config{Queues: []string{"default", "mail"}})
	require.NoError(t, err)
	_, err = c.Insert(ctx, kindArgs{kind: "k"}, &jobs.InsertOpts{Queue: "mail"})
	require.NoError(t, err)
	_, err = c.Insert(ctx, kindArgs{kind: "k"}, nil) // "default"
	require.NoError(t, err)
	_, err = c.Insert(ctx, kindArgs{kind: "k"}, &jobs.InsertOpts{Queue: "mial"})
	require.ErrorIs(t, err, jobs.ErrUnknownQueue)
	require.ErrorContains(t, err, `"mial"`)
	_, err = c.InsertMany(ctx, []jobs.InsertManyParams{
		{Args: kindArgs{kind: "k"}},
		{Args: kindArgs{kind: "k"}, Opts: &jobs.InsertOpts{Queue: "reports"}},
	})
	require.ErrorIs(t, err, jobs.ErrUnknownQueue)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
	require.Equal(t, 2, n)

	_, err = jobs.NewClient(pool, &jobs.Config{Queues: []string{"bad queue"}})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)
}

// Retry and Delete refuse a running job and are audited otherwise.
func TestRetryAndDelete(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	act := jobs.Action{Actor: "ops", Reason: "test"}
	var running, cancelled, succeeded int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, state, attempts, claim_token, generation, attempted_at, locked_by, locked_until)
		VALUES ('k', '{}', 'running', 1, gen_random_uuid(), 1, now(), 'w', now() + interval '1 minute') RETURNING id`).Scan(&running))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, state, finished_at, cancel_requested_at)
		VALUES ('k', '{}', 'cancelled', now(), now()) RETURNING id`).Scan(&cancelled))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, state, attempts, claim_token, generation, attempted_at, finished_at)
		VALUES ('k', '{}', 'succeeded', 1, gen_random_uuid(), 1, now(), now()) RETURNING id`).Scan(&succeeded))

	_, err = c.Retry(ctx, running, act)
	require.ErrorIs(t, err, jobs.ErrJobRunning)
	require.ErrorIs(t, c.Delete(ctx, running, act), jobs.ErrJobRunning)
	_, err = c.Retry(ctx, succeeded, act)
	require.ErrorIs(t, err, jobs.ErrAlreadyFinal)
	_, err = c.Retry(ctx, 1<<40, act)
	require.ErrorIs(t, err, jobs.ErrNotFound)
	_, err = c.Retry(ctx, cancelled, jobs.Action{})
	require.ErrorIs(t, err, jobs.ErrMissingActor)

	row, err := c.Retry(ctx, cancelled, act)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, row.State)
	require.Zero(t, row.Attempt)
	require.NoError(t, c.Delete(ctx, succeeded, act))
	_, err = c.Get(ctx, succeeded)
	require.ErrorIs(t, err, jobs.ErrNotFound)
	entries, err := c.Audit(ctx, 0, 0, 100)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, "retry", entries[0].Action)
	require.Equal(t, "delete", entries[1].Action)
}

// jobs.ErrUnknownKind and generics.ErrUnknownKind are one sentinel.
func TestUnknownKindIsOneSentinel(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: generics.NewRegistry()})
	require.NoError(t, err)
	_, err = c.Insert(context.Background(), kindArgs{kind: "nobody"}, nil)
	require.ErrorIs(t, err, jobs.ErrUnknownKind)
	require.ErrorIs(t, err, generics.ErrUnknownKind)
}
