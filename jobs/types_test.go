package jobs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// TestReadsSurfaceAnUndecodableErrorHistory checks that a stored error history that does not
// decode is reported by Get and List (naming the job) instead of being silently dropped, and
// that a well-formed one is decoded.
func TestReadsSurfaceAnUndecodableErrorHistory(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	good, err := c.Insert(ctx, blobArgs{Data: "x"}, nil)
	require.NoError(t, err)
	bad, err := c.Insert(ctx, blobArgs{Data: "y"}, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET errors = '[{"attempt":1,"code":"TIMEOUT","message":"slow","generation":1,"at":"2026-01-01T00:00:00Z"}]' WHERE id = $1`, good.Job.ID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET errors = '[{"attempt":"one"}]' WHERE id = $1`, bad.Job.ID)
	require.NoError(t, err)

	row, err := c.Get(ctx, good.Job.ID)
	require.NoError(t, err)
	require.Len(t, row.Errors, 1)
	require.Equal(t, "TIMEOUT", row.Errors[0].Code)

	_, err = c.Get(ctx, bad.Job.ID)
	require.ErrorIs(t, err, jobs.ErrCorruptRow)
	require.Contains(t, err.Error(), "job "+itoa(bad.Job.ID))

	_, err = c.List(ctx, jobs.ListParams{})
	require.ErrorIs(t, err, jobs.ErrCorruptRow)
	page, err := c.List(ctx, jobs.ListParams{AfterID: bad.Job.ID})
	require.NoError(t, err, "rows after the bad one still read")
	require.Empty(t, page.Jobs)
}

func itoa(n int64) string { return fmt.Sprint(n) }
