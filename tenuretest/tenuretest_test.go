package tenuretest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenuretest"
	"github.com/tenureq/tenure/worker"
)

func TestMain(m *testing.M) { tenuretest.Main(m) }

type Welcome struct {
	UserID int64  `json:"user_id"`
	Lang   string `json:"lang"`
}

func (Welcome) Kind() string        { return "welcome" }
func (Welcome) PayloadVersion() int { return 1 }

// recorder is a tenuretest.T that records failures instead of stopping the test.
type recorder struct {
	*testing.T
	failed []string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}
func (r *recorder) Errorf(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func TestRequireEnqueuedFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := tenuretest.Pool(t)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	_, err = c.Insert(ctx, Welcome{UserID: 1, Lang: "en"}, nil)
	require.NoError(t, err)
	_, err = c.Insert(ctx, Welcome{UserID: 2, Lang: "ko"}, &jobs.InsertOpts{Queue: "mail", Priority: jobs.PriorityHigh})
	require.NoError(t, err)

	got := tenuretest.RequireEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{Queue: "mail"})
	require.Len(t, got, 1)
	require.Equal(t, int64(2), got[0].Args.UserID)
	require.Len(t, tenuretest.RequireEnqueued[Welcome](ctx, t, pool, nil), 2)
	tenuretest.RequireEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{
		Priority: jobs.PriorityHigh, State: generics.JobStateReady, Args: func(a Welcome) bool { return a.Lang == "ko" }})
	tenuretest.RequireNotEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{Args: func(a Welcome) bool { return a.UserID == 3 }})
	tenuretest.RequireNotEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{State: generics.JobStateDead})

	// Failures name what was looked for and what is there.
	r := &recorder{T: t}
	tenuretest.RequireEnqueued(ctx, r, pool, &tenuretest.Match[Welcome]{Queue: "nope"})
	require.Len(t, r.failed, 1)
	require.Contains(t, r.failed[0], "queue=nope")
	require.Contains(t, r.failed[0], `"user_id":2`)
	r.failed = nil
	tenuretest.RequireNotEnqueued(ctx, r, pool, &tenuretest.Match[Welcome]{Queue: "mail"})
	require.Len(t, r.failed, 1)

	// Inside a transaction that has not committed.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = c.InsertTx(ctx, tx, Welcome{UserID: 3}, nil)
	require.NoError(t, err)
	tenuretest.RequireEnqueued(ctx, t, tx, &tenuretest.Match[Welcome]{Args: func(a Welcome) bool { return a.UserID == 3 }})
	tenuretest.RequireNotEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{Args: func(a Welcome) bool { return a.UserID == 3 }})
}

// Work runs the handler under a real claim: Effect and CompleteTx work.
func TestWorkRunsAJobThroughARealClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := tenuretest.Pool(t)
	_, err := pool.Exec(ctx, "CREATE TABLE greeted (user_id bigint PRIMARY KEY)")
	require.NoError(t, err)
	res := tenuretest.Work(ctx, t, pool, func(ctx context.Context, job *generics.Job[Welcome]) error {
		if _, err := worker.Effect(ctx, job.JobRow, "mail", func(ctx context.Context, call worker.EffectCall) (string, error) {
			return "sent " + call.Key, nil
		}); err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO greeted VALUES ($1)", job.Args.UserID); err != nil {
				return err
			}
			return worker.CompleteTx(ctx, tx, job.JobRow)
		})
	}, Welcome{UserID: 7}, nil)
	require.NoError(t, res.Outcome.Err)
	require.NoError(t, res.Outcome.HandlerErr)
	require.Equal(t, "succeeded", res.Outcome.Transition)
	require.Equal(t, generics.JobStateSucceeded, res.Job.State)
	var effects int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.effects WHERE job_id = $1", res.Job.ID).Scan(&effects))
	require.Equal(t, 1, effects)

	// A failing attempt is reported as such and the job is scheduled for a retry.
	res = tenuretest.Work(ctx, t, pool, func(ctx context.Context, job *generics.Job[Welcome]) error {
		return errors.New("smtp down")
	}, Welcome{UserID: 8}, &tenuretest.WorkOpts{Insert: &jobs.InsertOpts{Queue: "mail"}})
	require.Equal(t, "retried", res.Outcome.Transition)
	require.True(t, strings.Contains(res.Outcome.HandlerErr.Error(), "smtp down"))
	require.Equal(t, generics.JobStateReady, res.Job.State)
	require.Equal(t, "mail", res.Job.Queue)
}

// Tick declares its kind's defaults with the args type.
type Tick struct {
	N int `json:"n"`
}

func (Tick) Kind() string        { return "tt_tick" }
func (Tick) PayloadVersion() int { return 1 }
func (Tick) Defaults() generics.KindDefaults {
	return generics.KindDefaults{Queue: "periodic", Priority: 3, MaxAttempts: 4, Lease: 5 * time.Second,
		Timeout: 200 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryCap: 20 * time.Millisecond}
}

// Work runs the job as production would: in the declared queue, with the declared max
// attempts, lease, timeout and retry policy (issue 27: it ran attempts=1/25 in queue default).
func TestWorkUsesTheDeclaredDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := tenuretest.Pool(t)
	var seen generics.JobRow
	res := tenuretest.Work(ctx, t, pool, func(ctx context.Context, job *generics.Job[Tick]) error {
		seen = *job.JobRow
		<-ctx.Done() // outlives the declared 200ms timeout
		return ctx.Err()
	}, Tick{N: 1}, nil)
	require.Equal(t, "periodic", seen.Queue)
	require.Equal(t, 4, seen.MaxAttempts)
	require.Equal(t, 3, seen.Priority)
	require.Equal(t, 5*time.Second, seen.Lease)
	require.Equal(t, worker.CodeTimeout, res.Outcome.Code)
	require.Equal(t, "retried", res.Outcome.Transition)
	require.Equal(t, "periodic", res.Job.Queue)
	require.Equal(t, 4, res.Job.MaxAttempts)
	// The declared retry policy: a delay of at most the declared 20ms cap (the default
	// FullJitter{1s, 1h} draws it from [0, 2s) after attempt 1). Work stops the worker after the
	// first outcome, so the stored row is that attempt's: run_at - updated_at is the same delay.
	require.LessOrEqual(t, res.Outcome.Delay, 20*time.Millisecond)
	require.LessOrEqual(t, res.Job.RunAt.Sub(res.Job.UpdatedAt), 20*time.Millisecond)
}

type wfStep struct {
	Name string `json:"name"`
	Fail bool   `json:"fail,omitempty"`
}

func (wfStep) Kind() string        { return "wf_step" }
func (wfStep) PayloadVersion() int { return 1 }

// TestRunWorkflow: a diamond with a failing branch, run through real claims: what became ready
// ran after its dependencies, the failure cancelled its dependent, and the fan-in read outputs.
func TestRunWorkflow(t *testing.T) {
	ctx := context.Background()
	pool := tenuretest.Pool(t)
	w, err := worker.New(pool, &worker.Config{FetchPollMax: 100 * time.Millisecond})
	require.NoError(t, err)
	var joined string
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[wfStep]) error {
		if job.Args.Fail {
			return worker.Permanent(errors.New("no"))
		}
		if job.Args.Name == "join" {
			l, err := worker.DependencyOutput[string](ctx, "left")
			if err != nil {
				return err
			}
			r, err := worker.DependencyOutput[string](ctx, "right")
			if err != nil {
				return err
			}
			joined = l + "+" + r
		}
		return worker.SetOutput(ctx, job.Args.Name)
	}, nil)
	wf := jobs.NewWorkflow("diamond", nil).
		Add("root", wfStep{Name: "root"}, nil).
		Add("left", wfStep{Name: "left"}, &jobs.TaskOpts{DependsOn: []string{"root"}}).
		Add("right", wfStep{Name: "right"}, &jobs.TaskOpts{DependsOn: []string{"root"}}).
		Add("join", wfStep{Name: "join"}, &jobs.TaskOpts{DependsOn: []string{"left", "right"}}).
		Add("broken", wfStep{Name: "broken", Fail: true}, &jobs.TaskOpts{DependsOn: []string{"root"}}).
		Add("after_broken", wfStep{Name: "after_broken"}, &jobs.TaskOpts{DependsOn: []string{"broken"}})
	run := tenuretest.RunWorkflow(ctx, t, pool, w, wf, 0)
	require.Equal(t, generics.JobStateSucceeded, run.Tasks["join"].State)
	require.Equal(t, generics.JobStateDead, run.Tasks["broken"].State)
	require.Equal(t, generics.JobStateCancelled, run.Tasks["after_broken"].State)
	require.Equal(t, "left+right", joined)
	require.Equal(t, "root", run.Started[0])
	require.Equal(t, "join", run.Started[len(run.Started)-1])
	require.NotContains(t, run.Started, "after_broken")
}
