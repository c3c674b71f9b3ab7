package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

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
