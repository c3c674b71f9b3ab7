package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// TestWorkflowBuilderRefuses: what cannot be inserted is refused at build time, with a typed
// error naming the task: unknown dependencies, cycles (with the cycle), self-dependencies,
// repeated names, bad names, unsupported options, an empty workflow.
func TestWorkflowBuilderRefuses(t *testing.T) {
	t.Parallel()
	a := blobArgs{Data: "x"}
	dep := func(names ...string) *jobs.TaskOpts { return &jobs.TaskOpts{DependsOn: names} }
	for _, tc := range []struct {
		name  string
		wf    *jobs.Workflow
		is    error
		task  string
		cycle []string
	}{
		{"unknown", jobs.NewWorkflow("w", nil).Add("a", a, nil).Add("b", a, dep("a", "nope")), jobs.ErrUnknownDependency, "b", nil},
		{"cycle", jobs.NewWorkflow("w", nil).Add("a", a, dep("c")).Add("b", a, dep("a")).Add("c", a, dep("b")).Add("d", a, nil),
			jobs.ErrWorkflowCycle, "a", []string{"a", "c", "b", "a"}},
		{"two-cycle after a diamond", jobs.NewWorkflow("w", nil).Add("r", a, nil).Add("x", a, dep("r")).Add("y", a, dep("r")).
			Add("z", a, dep("x", "y")).Add("p", a, dep("z", "q")).Add("q", a, dep("p")), jobs.ErrWorkflowCycle, "p", []string{"p", "q", "p"}},
		{"self", jobs.NewWorkflow("w", nil).Add("a", a, dep("a")), jobs.ErrWorkflowCycle, "a", nil},
		{"twice", jobs.NewWorkflow("w", nil).Add("a", a, nil).Add("a", a, nil), jobs.ErrInvalidWorkflow, "a", nil},
		{"dep twice", jobs.NewWorkflow("w", nil).Add("a", a, nil).Add("b", a, dep("a", "a")), jobs.ErrInvalidWorkflow, "b", nil},
		{"empty name", jobs.NewWorkflow("w", nil).Add("", a, nil), jobs.ErrInvalidWorkflow, "", nil},
		{"long name", jobs.NewWorkflow("w", nil).Add(strings.Repeat("n", 201), a, nil), jobs.ErrInvalidWorkflow, strings.Repeat("n", 201), nil},
		{"nil args", jobs.NewWorkflow("w", nil).Add("a", nil, nil), jobs.ErrInvalidOptions, "a", nil},
		{"unique", jobs.NewWorkflow("w", nil).Add("a", a, &jobs.TaskOpts{InsertOpts: jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}}),
			jobs.ErrInvalidOptions, "a", nil},
		{"sequence", jobs.NewWorkflow("w", nil).Add("a", a, &jobs.TaskOpts{InsertOpts: jobs.InsertOpts{Sequence: "s"}}), jobs.ErrInvalidOptions, "a", nil},
		{"policy", jobs.NewWorkflow("w", nil).Add("a", a, &jobs.TaskOpts{OnDependencyFailure: "later"}), jobs.ErrInvalidOptions, "a", nil},
		{"workflow policy", jobs.NewWorkflow("w", &jobs.WorkflowOpts{OnDependencyFailure: "x"}).Add("a", a, nil), jobs.ErrInvalidOptions, "", nil},
		{"no task", jobs.NewWorkflow("w", nil), jobs.ErrInvalidWorkflow, "", nil},
		{"bad workflow name", jobs.NewWorkflow("", nil).Add("a", a, nil), jobs.ErrInvalidWorkflow, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.wf.Validate()
			require.ErrorIs(t, err, tc.is)
			require.ErrorIs(t, err, jobs.ErrInvalidWorkflow)
			var we *jobs.WorkflowError
			require.ErrorAs(t, err, &we)
			require.Equal(t, tc.task, we.Task)
			if tc.cycle != nil {
				require.Equal(t, tc.cycle, we.Cycle)
			}
		})
	}
	require.NoError(t, jobs.NewWorkflow("w", nil).Add("b", a, dep("a")).Add("a", a, nil).Validate(), "a dependency may be added after its dependent")
}

// TestInsertWorkflowTx: a workflow goes in with the caller's business write, all or nothing;
// a task whose args fail validation refuses the whole workflow before anything is sent.
func TestInsertWorkflowTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "CREATE TABLE orders (id bigserial PRIMARY KEY)")
	require.NoError(t, err)
	wf := jobs.NewWorkflow("order", nil).
		Add("charge", emailArgs{To: "a@b.c"}, nil).
		Add("ship", blobArgs{Data: "box"}, &jobs.TaskOpts{DependsOn: []string{"charge"}, InsertOpts: jobs.InsertOpts{Queue: "ship", Tags: []string{"t"}}})

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO orders DEFAULT VALUES")
	require.NoError(t, err)
	res, err := c.InsertWorkflowTx(ctx, tx, wf)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = c.Get(ctx, res.Tasks["charge"].ID)
	require.ErrorIs(t, err, jobs.ErrNotFound)
	_, err = c.Workflow(ctx, wf.ID())
	require.ErrorIs(t, err, jobs.ErrWorkflowNotFound)

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders DEFAULT VALUES"); err != nil {
			return err
		}
		res, err = c.InsertWorkflowTx(ctx, tx, wf)
		return err
	}))
	v, err := c.Workflow(ctx, wf.ID())
	require.NoError(t, err)
	require.Len(t, v.Tasks, 2)
	require.Equal(t, []jobs.WorkflowEdge{{DepID: res.Tasks["charge"].ID, JobID: res.Tasks["ship"].ID, OnFailure: "cancel"}}, v.Edges)
	ship := v.Tasks[1]
	require.Equal(t, "ship", ship.TaskName)
	require.Equal(t, generics.JobStateWaiting, ship.State)
	require.Equal(t, "ship", ship.Queue)
	require.Equal(t, []string{"t"}, ship.Tags)
	require.Equal(t, "order", ship.Metadata[jobs.WorkflowNameMetadata])
	require.Equal(t, 1, ship.DepsPending)

	// The same workflow again under the same id: refused, typed, nothing written.
	_, err = c.InsertWorkflow(ctx, wf)
	require.ErrorIs(t, err, jobs.ErrWorkflowExists)

	bad := jobs.NewWorkflow("bad", nil).Add("ok", blobArgs{}, nil).Add("mail", emailArgs{To: "nobody"}, &jobs.TaskOpts{DependsOn: []string{"ok"}})
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = c.InsertWorkflowTx(ctx, tx, bad)
	var pe *generics.PayloadError
	require.ErrorAs(t, err, &pe, "the task's args are validated as Insert validates them")
	require.Contains(t, err.Error(), `task "mail"`)
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n), "tx is still usable")
	require.Equal(t, 2, n)
}

// TestCancelChainWithoutRecursion: cancelling the head of a 1,000-task chain cancels every
// task behind it in the cancel's own transaction, by a loop in the trigger (a trigger nesting
// per task would exhaust the server's stack long before), and the cancel's audit is the only
// entry.
func TestCancelChainWithoutRecursion(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("chain", nil).Add("t0", blobArgs{}, nil)
	const n = 1000
	for i := 1; i < n; i++ {
		wf.Add(fmt.Sprintf("t%d", i), blobArgs{}, &jobs.TaskOpts{DependsOn: []string{fmt.Sprintf("t%d", i-1)}})
	}
	// a side branch that runs anyway: released, not cancelled
	wf.Add("cleanup", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"t500"}, OnDependencyFailure: jobs.RunDependents})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	out, err := c.Cancel(ctx, res.Tasks["t0"].ID, jobs.Action{Actor: "t", Reason: "stop"})
	require.NoError(t, err)
	require.Equal(t, jobs.Cancelled, out)
	var cancelled, ready int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'cancelled'), count(*) FILTER (WHERE state = 'ready')
		FROM tenure.jobs`).Scan(&cancelled, &ready))
	require.Equal(t, n, cancelled)
	require.Equal(t, 1, ready, "cleanup runs anyway")
	require.Equal(t, generics.JobStateReady, getState(t, c, res.Tasks["cleanup"].ID))

	// A waiting task is cancelled by Cancel too; Retry refuses a waiting task.
	wf2 := jobs.NewWorkflow("two", nil).Add("a", blobArgs{}, nil).Add("b", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"a"}}).
		Add("c", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"b"}})
	res2, err := c.InsertWorkflow(ctx, wf2)
	require.NoError(t, err)
	_, err = c.Retry(ctx, res2.Tasks["b"].ID, jobs.Action{Actor: "t", Reason: "r"})
	require.ErrorIs(t, err, jobs.ErrJobWaiting)
	err = c.Delete(ctx, res2.Tasks["a"].ID, jobs.Action{Actor: "t", Reason: "r"})
	require.ErrorIs(t, err, jobs.ErrHasDependents)
	out, err = c.Cancel(ctx, res2.Tasks["b"].ID, jobs.Action{Actor: "t", Reason: "r"})
	require.NoError(t, err)
	require.Equal(t, jobs.Cancelled, out)
	require.Equal(t, generics.JobStateCancelled, getState(t, c, res2.Tasks["c"].ID))
	require.Equal(t, generics.JobStateReady, getState(t, c, res2.Tasks["a"].ID))
}

func getState(t *testing.T, c *jobs.Client, id int64) generics.JobState {
	t.Helper()
	r, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	return r.State
}

// TestSequenceOptions: sequence keys are validated like concurrency keys, and a sequence job
// is neither unique nor inserted by COPY (InsertManyFast).
func TestSequenceOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	for _, o := range []*jobs.InsertOpts{
		{Sequence: strings.Repeat("k", 201)},
		{Sequence: "a\x00b"},
		{Sequence: "k", Unique: &jobs.UniqueOpts{}},
		{Sequence: "k", SequenceOnFailure: "later"},
		{SequenceOnFailure: jobs.SequenceSkip},
	} {
		_, err := c.Insert(ctx, blobArgs{}, o)
		require.ErrorIs(t, err, jobs.ErrInvalidOptions, "%+v", o)
	}
	_, err = c.InsertManyFast(ctx, []jobs.InsertManyParams{{Args: blobArgs{}, Opts: &jobs.InsertOpts{Sequence: "k"}}})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)
	require.Zero(t, count(t, c))

	// A sequence's first job is ready, the next waits; a rolled-back insert leaves no trace in
	// the sequence (the next one waits for the committed job, not the rolled-back one).
	first, err := c.Insert(ctx, blobArgs{}, &jobs.InsertOpts{Sequence: "k"})
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, first.Job.State)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = c.InsertTx(ctx, tx, blobArgs{}, &jobs.InsertOpts{Sequence: "k"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	second, err := c.Insert(ctx, blobArgs{}, &jobs.InsertOpts{Sequence: "k"})
	require.NoError(t, err)
	require.Equal(t, generics.JobStateWaiting, second.Job.State)
	var dep int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT dep_id FROM tenure.job_deps WHERE job_id = $1", second.Job.ID).Scan(&dep))
	require.Equal(t, first.Job.ID, dep)
}

// TestReleaseKeepsRunAtAndCountsOnce drives the database's release directly (state changes as
// the engine's finishes make them): a released task keeps its own later run_at; a dependency
// counted when it died (RunDependents) is not counted again when an operator's retry makes it
// succeed; a fan-in is released by its last dependency only.
func TestReleaseKeepsRunAtAndCountsOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	wf := jobs.NewWorkflow("direct", nil).
		Add("a", blobArgs{}, nil).
		Add("b", blobArgs{}, nil).
		Add("late", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"a"}, InsertOpts: jobs.InsertOpts{RunAt: later}}).
		Add("fan", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"a", "b"}, OnDependencyFailure: jobs.RunDependents})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	set := func(task, state string) {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE tenure.jobs SET state = $2::tenure.job_state,
			finished_at = CASE WHEN $2 IN ('succeeded', 'dead', 'cancelled') THEN now() END WHERE id = $1`, res.Tasks[task].ID, state)
		require.NoError(t, err)
	}
	row := func(task string) *generics.JobRow {
		t.Helper()
		r, err := c.Get(ctx, res.Tasks[task].ID)
		require.NoError(t, err)
		return r
	}
	set("a", "dead")
	require.Equal(t, generics.JobStateCancelled, row("late").State, "late cancels on a dead dependency")
	require.Equal(t, generics.JobStateWaiting, row("fan").State)
	require.Equal(t, 1, row("fan").DepsPending)
	// a retried and succeeding: its edge to fan was counted already.
	set("a", "ready")
	set("a", "succeeded")
	require.Equal(t, generics.JobStateWaiting, row("fan").State)
	require.Equal(t, 1, row("fan").DepsPending)
	set("b", "succeeded")
	require.Equal(t, generics.JobStateReady, row("fan").State)
	require.Zero(t, row("fan").DepsPending)

	wf2 := jobs.NewWorkflow("late", nil).
		Add("a", blobArgs{}, nil).
		Add("late", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"a"}, InsertOpts: jobs.InsertOpts{RunAt: later}})
	res, err = c.InsertWorkflow(ctx, wf2)
	require.NoError(t, err)
	set("a", "succeeded")
	r := row("late")
	require.Equal(t, generics.JobStateReady, r.State)
	require.True(t, r.RunAt.Equal(later), "released, due at its own run_at %v, got %v", later, r.RunAt)
}

// TestSequencePathsHoldOnFailure: InsertMany and tenure.enqueue treat a sequence's dead
// previous job as Insert does: the new job waits under SequenceBlock (and is released when
// that job succeeds after a retry) and is ready at once under SequenceSkip; within one
// InsertMany call the jobs of a key wait for each other in input order, each edge with its
// own policy. tenure.enqueue refuses a bad sequence, a unique sequenced job and a policy
// without a sequence (22023), writing nothing.
func TestSequencePathsHoldOnFailure(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	set := func(id int64, state string) {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE tenure.jobs SET state = $2::tenure.job_state,
			finished_at = CASE WHEN $2 IN ('succeeded', 'dead', 'cancelled') THEN now() END WHERE id = $1`, id, state)
		require.NoError(t, err)
	}
	edges := func(id int64) (deps []int64, policies []string) {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT dep_id, on_failure FROM tenure.job_deps WHERE job_id = $1 ORDER BY dep_id", id)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var d int64
			var p string
			require.NoError(t, rows.Scan(&d, &p))
			deps, policies = append(deps, d), append(policies, p)
		}
		require.NoError(t, rows.Err())
		return deps, policies
	}
	insert := func(path, key string, pol jobs.SequenceOnFailure) int64 {
		t.Helper()
		switch path {
		case "many":
			res, err := c.InsertMany(ctx, []jobs.InsertManyParams{{Args: blobArgs{}, Opts: &jobs.InsertOpts{Sequence: key, SequenceOnFailure: pol}}})
			require.NoError(t, err)
			return res[0].Job.ID
		default:
			var id int64
			require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM tenure.enqueue('blob', '{}', sequence => $1, sequence_on_failure => $2)`,
				key, string(pol)).Scan(&id))
			return id
		}
	}
	for _, path := range []string{"many", "sql"} {
		for _, pol := range []jobs.SequenceOnFailure{jobs.SequenceBlock, jobs.SequenceSkip} {
			key := path + "-" + string(pol)
			first := insert(path, key, pol)
			require.Equal(t, generics.JobStateReady, getState(t, c, first), key)
			second := insert(path, key, pol)
			require.Equal(t, generics.JobStateWaiting, getState(t, c, second), key)
			deps, _ := edges(second)
			require.Equal(t, []int64{first}, deps, key)
			set(first, "dead") // second: blocked, or released
			set(second, "dead")
			third := insert(path, key, pol)
			if pol == jobs.SequenceBlock {
				require.Equal(t, generics.JobStateWaiting, getState(t, c, third), "%s: a dead previous job blocks", key)
				set(second, "ready")
				set(second, "succeeded")
				require.Equal(t, generics.JobStateReady, getState(t, c, third), "%s: released by the retried job's success", key)
			} else {
				require.Equal(t, generics.JobStateReady, getState(t, c, third), "%s: skips a dead previous job", key)
			}
		}
	}

	// One InsertMany call: two keys interleaved, each job waiting for the one before it with
	// its own policy; the first waits for the key's previous job.
	before, err := c.Insert(ctx, blobArgs{}, &jobs.InsertOpts{Sequence: "a"})
	require.NoError(t, err)
	res, err := c.InsertMany(ctx, []jobs.InsertManyParams{
		{Args: blobArgs{}, Opts: &jobs.InsertOpts{Sequence: "b"}},
		{Args: blobArgs{}, Opts: &jobs.InsertOpts{Sequence: "a", SequenceOnFailure: jobs.SequenceSkip}},
		{Args: blobArgs{}, Opts: &jobs.InsertOpts{Sequence: "b", SequenceOnFailure: jobs.SequenceSkip}},
		{Args: blobArgs{}, Opts: &jobs.InsertOpts{Sequence: "a"}},
	})
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, res[0].Job.State)
	for i, want := range []struct {
		dep    int64
		policy string
	}{{0, ""}, {before.Job.ID, "run"}, {res[0].Job.ID, "run"}, {res[1].Job.ID, "block"}} {
		deps, policies := edges(res[i].Job.ID)
		if want.dep == 0 {
			require.Empty(t, deps)
			continue
		}
		require.Equal(t, []int64{want.dep}, deps, "job %d", i)
		require.Equal(t, []string{want.policy}, policies, "job %d", i)
		require.Equal(t, generics.JobStateWaiting, res[i].Job.State, "job %d", i)
	}
	last := map[string]int64{}
	rows, err := pool.Query(ctx, "SELECT key, last_job_id FROM tenure.sequences WHERE key IN ('a', 'b')")
	require.NoError(t, err)
	for rows.Next() {
		var k string
		var id int64
		require.NoError(t, rows.Scan(&k, &id))
		last[k] = id
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int64{"a": res[3].Job.ID, "b": res[2].Job.ID}, last)

	n := count(t, c)
	for _, q := range []string{
		`SELECT tenure.enqueue('blob', '{}', sequence => '')`,
		`SELECT tenure.enqueue('blob', '{}', sequence => repeat('k', 201))`,
		`SELECT tenure.enqueue('blob', '{}', sequence => 'k', unique_args => '{}')`,
		`SELECT tenure.enqueue('blob', '{}', sequence => 'k', sequence_on_failure => 'later')`,
		`SELECT tenure.enqueue('blob', '{}', sequence_on_failure => 'skip')`,
	} {
		_, err := pool.Exec(ctx, q)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, q)
		require.Equal(t, "22023", pgErr.Code, q)
	}
	require.Equal(t, n, count(t, c), "refused enqueues write nothing")
}

// TestPruneExpiredPrunesIdleSequences: PruneExpired deletes the tenure.sequences rows whose
// last job it pruned (or that was deleted), keeps those of sequences with a job left, and a
// later insert into a pruned key starts it again, ready at once.
func TestPruneExpiredPrunesIdleSequences(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	var done, live []int64
	for i := range 30 {
		key := fmt.Sprintf("k%02d", i)
		for range 2 {
			r, err := c.Insert(ctx, blobArgs{}, &jobs.InsertOpts{Sequence: key})
			require.NoError(t, err)
			if i < 25 {
				done = append(done, r.Job.ID)
			} else {
				live = append(live, r.Job.ID)
			}
		}
	}
	// The first 25 keys' jobs succeeded an hour ago (in order, as the engine would have run
	// them); the last 5 keys' jobs have not run.
	for _, id := range done {
		_, err := pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'ready' WHERE id = $1 AND state = 'waiting'`, id)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'succeeded', finished_at = now() - interval '1 hour' WHERE id = $1`, id)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `UPDATE tenure.sequences SET updated_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	require.EqualValues(t, 30, countWhere(t, pool, "SELECT count(*) FROM tenure.sequences"))

	res, err := c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now().Add(-time.Minute), DeadBefore: time.Now().Add(-time.Minute), BatchSize: 7})
	require.NoError(t, err)
	require.True(t, res.Drained)
	require.EqualValues(t, 50, res.Finished)
	require.EqualValues(t, 25, res.Sequences, "the keys with nothing left")
	require.EqualValues(t, 5, countWhere(t, pool, "SELECT count(*) FROM tenure.sequences"))
	require.Zero(t, countWhere(t, pool, `SELECT count(*) FROM tenure.sequences s
		WHERE NOT EXISTS (SELECT 1 FROM tenure.jobs j WHERE j.id = s.last_job_id)`))

	// A pruned key starts again; a live one goes on waiting for its last job.
	r, err := c.Insert(ctx, blobArgs{}, &jobs.InsertOpts{Sequence: "k00"})
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, r.Job.State)
	r, err = c.Insert(ctx, blobArgs{}, &jobs.InsertOpts{Sequence: "k29"})
	require.NoError(t, err)
	require.Equal(t, generics.JobStateWaiting, r.Job.State)

	// A row written after the cutoff is not read (k00 again, live or not).
	res, err = c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now().Add(-time.Minute)})
	require.NoError(t, err)
	require.Zero(t, res.Sequences)
	require.EqualValues(t, 6, countWhere(t, pool, "SELECT count(*) FROM tenure.sequences"))
}
