package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// Pause and resume need an actor, a reason and a valid queue name; resuming a queue that was
// never paused changes nothing but is recorded. (The pause itself is proven against running
// workers in worker/pause_test.go.)
func TestPauseQueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.PauseQueue(ctx, "default", jobs.Action{Actor: "ops"})
	require.ErrorIs(t, err, jobs.ErrMissingActor)
	_, err = c.ResumeQueue(ctx, "bad queue!", jobs.Action{Actor: "ops", Reason: "r"})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)
	out, err := c.ResumeQueue(ctx, "never-paused", jobs.Action{Actor: "ops", Reason: "r"})
	require.NoError(t, err)
	require.Equal(t, jobs.QueueUnchanged, out)
	qs, err := c.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.False(t, qs[0].Paused)
	require.Nil(t, qs[0].PausedAt)
	require.Equal(t, "ops", qs[0].UpdatedBy)
}
