package jobs_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/jobs"
)

// TestNotifyDoneSettledReadsByKey: the engine's signal read after a finish that settled
// dependents (NotifyDoneSettled) reads what it names, by primary key, whatever else the table
// holds. Its generic plan is built once per engine connection, here while the table is small
// and no job has finished yet, as for a worker started on a young queue; the table then grows by
// 20,000 jobs, half of them finished. The previous text's plan hash-joined the dependents
// with a scan of every ready job, and looked for cancelled dependents (the cascade) through
// jobs_finished_idx, every finished job per dependent, so each finish batch of a workflow paid
// reads of the whole queue (bench/results/2026-12-04-workflow-settle.md). Checked against
// the text before f2d1f2b: it fails (1,950 buffers). The cascade's walk (fixed in c959827)
// appeared with a plan built after VACUUM ANALYZE of a table where no job had finished (the
// 10-task workflows' profile); this test's plans did not pick it, so it does not catch it.
func TestNotifyDoneSettledReadsByKey(t *testing.T) {
	t.Parallel()
	pr := newProfiler(t)
	ctx := context.Background()
	wf := jobs.NewWorkflow("fan", nil)
	wf.Add("root", blobArgs{}, nil)
	var names []string
	for i := range 60 {
		names = append(names, "t"+strconv.Itoa(i))
		wf.Add(names[i], blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"root"}})
	}
	wf.Add("join", blobArgs{}, &jobs.TaskOpts{DependsOn: names})
	res, err := pr.c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	root := res.Tasks["root"].ID
	tasks := make([]int64, 30)
	for i := range tasks {
		tasks[i] = res.Tasks[names[i]].ID
	}
	// statistics of the young queue (no job finished yet), then the root's finish releases its
	// 60 dependents, and its signal read builds the plan
	_, err = pr.pool.Exec(ctx, `ANALYZE tenure.jobs; ANALYZE tenure.job_deps`)
	require.NoError(t, err)
	var p profile
	pr.finishBatch(t, &p, []int64{root})
	var ready int
	require.NoError(t, pr.pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE workflow_id = $1 AND state = 'ready'`, wf.ID()).Scan(&ready))
	require.Equal(t, 60, ready)
	for range 4 {
		ps := make([]jobs.InsertManyParams, 5000)
		for i := range ps {
			ps[i] = jobs.InsertManyParams{Args: blobArgs{}}
		}
		_, err := pr.c.InsertMany(ctx, ps)
		require.NoError(t, err)
	}
	// half of them finished: the cascade's lookup of cancelled dependents walked them all
	_, err = pr.pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'succeeded', finished_at = now()
		WHERE workflow_id IS NULL AND id % 2 = 0`)
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		settled []int64
		max     int64
	}{
		{"the root: 60 released dependents", []int64{root}, 400},
		{"30 tasks: one waiting join", tasks, 300},
	} {
		// The least of two calls: a call that has to plan the wrapper's statement again counts
		// the planner's reads too (~160 buffers). It does so after anything that invalidates
		// the cached plan: an ANALYZE, or, on a busy server (CI), an overflow of the shared
		// invalidation queue, which resets every cache (CI read 426 buffers once, 306 here;
		// 455–464 with an ANALYZE before the call, of which the statement's own 306).
		var least int64 = -1
		for range 2 {
			tx, err := pr.pool.Begin(ctx)
			require.NoError(t, err)
			c := pr.explain(t, tx, `SELECT count(*) FROM public.prof_nds($1, $2)`, []string{}, tc.settled)
			require.NoError(t, tx.Rollback(ctx))
			if n := c.hit + c.read; least < 0 || n < least {
				least = n
			}
		}
		t.Logf("%s: %d buffers", tc.name, least)
		require.LessOrEqual(t, least, tc.max, "%s: NotifyDoneSettled reads %d buffers with 20,000 other jobs", tc.name, least)
	}
}
