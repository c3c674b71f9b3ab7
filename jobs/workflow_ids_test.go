package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// TestInsertWorkflowTakenIDRefused: a workflow id is taken once. A second workflow under a
// caller-chosen id already used — other task names, so no task name collides — is refused
// with ErrWorkflowExists, and nothing of it is written: neither its tasks nor its edges, nor
// the caller's business write in the same transaction. (Before migration 0031 the id was
// unique only together with a task name, so such a workflow merged into the first.)
func TestInsertWorkflowTakenIDRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "CREATE TABLE orders (id bigserial PRIMARY KEY)")
	require.NoError(t, err)
	id := uuid.New()
	first := jobs.NewWorkflow("first", &jobs.WorkflowOpts{ID: id}).
		Add("a", blobArgs{}, nil).
		Add("b", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"a"}})
	_, err = c.InsertWorkflow(ctx, first)
	require.NoError(t, err)

	other := jobs.NewWorkflow("other", &jobs.WorkflowOpts{ID: id}).
		Add("x", blobArgs{}, nil).
		Add("y", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"x"}})
	_, err = c.InsertWorkflow(ctx, other)
	require.ErrorIs(t, err, jobs.ErrWorkflowExists)
	var we *jobs.WorkflowExistsError
	require.True(t, errors.As(err, &we))
	require.Equal(t, id, we.ID)
	require.Equal(t, "other", we.Workflow)

	// In the caller's transaction: the statement fails, the transaction with it.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders DEFAULT VALUES"); err != nil {
			return err
		}
		_, err := c.InsertWorkflowTx(ctx, tx, other)
		return err
	})
	require.ErrorIs(t, err, jobs.ErrWorkflowExists)
	require.Zero(t, countWhere(t, pool, "SELECT count(*) FROM orders"))

	v, err := c.Workflow(ctx, id)
	require.NoError(t, err)
	require.Len(t, v.Tasks, 2, "the first workflow, alone")
	require.Equal(t, "a", v.Tasks[0].TaskName)
	require.Equal(t, "b", v.Tasks[1].TaskName)
	require.Len(t, v.Edges, 1)
	require.EqualValues(t, 2, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs"))
	require.EqualValues(t, 1, countWhere(t, pool, "SELECT count(*) FROM tenure.job_deps"))
	require.EqualValues(t, 1, countWhere(t, pool, "SELECT count(*) FROM tenure.workflows"))

	// A workflow with a fresh id goes in beside it.
	_, err = c.InsertWorkflow(ctx, jobs.NewWorkflow("other", nil).Add("x", blobArgs{}, nil))
	require.NoError(t, err)
	require.EqualValues(t, 2, countWhere(t, pool, "SELECT count(*) FROM tenure.workflows"))
}

// TestInsertWorkflowConcurrentSameID: two transactions inserting workflows under one new id at
// once: exactly one commits, the other is refused with ErrWorkflowExists once the first
// commits, and the table holds one workflow's tasks.
func TestInsertWorkflowConcurrentSameID(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	id := uuid.New()
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			wf := jobs.NewWorkflow(fmt.Sprintf("w%d", i), &jobs.WorkflowOpts{ID: id})
			for k := range 50 {
				wf.Add(fmt.Sprintf("w%d-t%d", i, k), blobArgs{}, nil)
			}
			_, err := c.InsertWorkflow(ctx, wf)
			errs <- err
		}()
	}
	var ok, exists int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, jobs.ErrWorkflowExists):
			exists++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	require.Equal(t, 1, ok)
	require.Equal(t, 1, exists)
	require.EqualValues(t, 50, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs WHERE workflow_id = $1", id))
	require.EqualValues(t, 1, countWhere(t, pool, "SELECT count(DISTINCT metadata->>'tenure.workflow') FROM tenure.jobs"))
}

// TestPruneExpiredPrunesEmptyWorkflows: PruneExpired deletes the tenure.workflows rows of
// workflows whose every task it pruned, keeps those with a task left (one finished task
// pruned, one still waiting) and those created after the cutoff, and a pruned workflow's id
// may be used again.
func TestPruneExpiredPrunesEmptyWorkflows(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	var done, partial []uuid.UUID
	for i := range 12 {
		wf := jobs.NewWorkflow(fmt.Sprintf("w%d", i), nil).
			Add("a", blobArgs{}, nil).
			Add("b", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"a"}})
		_, err := c.InsertWorkflow(ctx, wf)
		require.NoError(t, err)
		if i < 9 {
			done = append(done, wf.ID())
		} else {
			partial = append(partial, wf.ID())
		}
	}
	// The first 9 workflows ran to the end an hour ago; of the last 3 only "a" did.
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'succeeded', finished_at = now() - interval '1 hour'
		WHERE workflow_id = ANY($1) OR (workflow_id = ANY($2) AND task_name = 'a')`, done, partial)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE tenure.workflows SET created_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	// One more, finished but created after the cutoff: its row is not read.
	late := jobs.NewWorkflow("late", nil).Add("a", blobArgs{}, nil)
	_, err = c.InsertWorkflow(ctx, late)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'succeeded', finished_at = now() - interval '1 hour' WHERE workflow_id = $1`, late.ID())
	require.NoError(t, err)

	res, err := c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now().Add(-time.Minute), BatchSize: 4})
	require.NoError(t, err)
	require.True(t, res.Drained)
	require.EqualValues(t, 9*2+3+1, res.Finished)
	require.EqualValues(t, 9, res.Workflows, "the workflows with nothing left")
	require.EqualValues(t, 4, countWhere(t, pool, "SELECT count(*) FROM tenure.workflows"))
	require.Zero(t, countWhere(t, pool, "SELECT count(*) FROM tenure.workflows WHERE id = ANY($1)", done))
	require.EqualValues(t, 3, countWhere(t, pool, "SELECT count(*) FROM tenure.workflows WHERE id = ANY($1)", partial))

	// A pruned id is free again; a live one is still taken.
	_, err = c.InsertWorkflow(ctx, jobs.NewWorkflow("again", &jobs.WorkflowOpts{ID: done[0]}).Add("a", blobArgs{}, nil))
	require.NoError(t, err)
	_, err = c.InsertWorkflow(ctx, jobs.NewWorkflow("again", &jobs.WorkflowOpts{ID: partial[0]}).Add("z", blobArgs{}, nil))
	require.ErrorIs(t, err, jobs.ErrWorkflowExists)
}
