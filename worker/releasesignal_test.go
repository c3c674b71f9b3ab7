package worker_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestReleaseSignalsAfterTheCommit: the engine's finish statements release and cancel
// dependents in their own transaction (the contract) but send no NOTIFY in it (migration
// 0029): a NOTIFY in a writing transaction holds PostgreSQL's one notification-queue lock
// through the commit's WAL flush, so every finish that released something serialized with
// every other notifying commit. The signals come from NotifyDoneMany after the commit: the
// wake-up of the released dependent's queue, and the done signal of the cancelled dependents,
// down a cascade.
//
// The check is by order: a listener receives a session's notifications in commit order, so
// after the finishes commit the test notifies a sentinel from the same session; the first
// notification the listener gets must be the sentinel. Before 0029 the settle's own NOTIFYs
// (b's wake-up, y's and z's done) came first: the test fails with settle_jobs ignoring
// tenure.signals.
func TestReleaseSignalsAfterTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 6 })
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("signals", nil).
		Add("a", stepArgs{Name: "a"}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}, InsertOpts: jobs.InsertOpts{Queue: "wake", Priority: 2}}).
		Add("x", stepArgs{Name: "x"}, nil).
		Add("y", stepArgs{Name: "y"}, &jobs.TaskOpts{DependsOn: []string{"x"}}).
		Add("z", stepArgs{Name: "z"}, &jobs.TaskOpts{DependsOn: []string{"y"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	id := func(name string) int64 { return res.Tasks[name].ID }

	listen, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listen.Release()
	_, err = listen.Exec(ctx, "LISTEN tenure_jobs; LISTEN tenure_done")
	require.NoError(t, err)

	// a and x as a worker's claim leaves them.
	tokA, tokX := uuid.New(), uuid.New()
	for name, tok := range map[string]uuid.UUID{"a": tokA, "x": tokX} {
		_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'running', attempts = 1, generation = 1, claim_token = $2,
			locked_by = 't', attempted_at = now(), locked_until = now() + interval '1 hour' WHERE id = $1`, id(name), tok)
		require.NoError(t, err)
	}

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	q := gen.New(conn)
	done, err := q.CompleteMany(ctx, gen.CompleteManyParams{Ids: []int64{id("a")}, Tokens: []uuid.UUID{tokA}, Outputs: [][]byte{[]byte("null")}})
	require.NoError(t, err)
	require.Equal(t, []*gen.CompleteManyRow{{ID: id("a"), Settles: true}}, done, "a landed, with dependents to signal")
	failed, err := q.FailMany(ctx, gen.FailManyParams{Ids: []int64{id("x")}, Tokens: []uuid.UUID{tokX}, States: []string{"dead"},
		DelayUs: []int64{0}, Codes: []string{"BOOM"}, Messages: []string{"x fails"}})
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, gen.TenureJobStateDead, failed[0].State)
	require.True(t, failed[0].Settles)

	// The release and the cascade are the finishes' own (committed with them).
	for name, want := range map[string]generics.JobState{"b": generics.JobStateReady, "y": generics.JobStateCancelled, "z": generics.JobStateCancelled} {
		require.Equal(t, want, getJob(t, c, id(name)).State, name)
	}
	_, err = conn.Exec(ctx, "SELECT pg_notify('tenure_jobs', 'sentinel')")
	require.NoError(t, err)
	next := func() (string, string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := listen.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Channel, n.Payload
	}
	ch, p := next()
	require.Equal(t, "tenure_jobs/sentinel", ch+"/"+p, "a finish notified inside its transaction")

	// After the commit: the done signal of a and x, and what their settles did.
	n, err := q.NotifyDoneSettled(ctx, gen.NotifyDoneSettledParams{
		Payloads: []string{fmt.Sprintf("%d,%d", id("a"), id("x"))}, Settled: []int64{id("a"), id("x")}})
	require.NoError(t, err)
	var woken []string
	ended := map[int64]bool{}
	for len(ended) < 4 || len(woken) < 1 {
		ch, p := next()
		switch ch {
		case "tenure_jobs":
			woken = append(woken, p)
		case "tenure_done":
			for _, e := range strings.Split(p, ",") {
				v, err := strconv.ParseInt(e, 10, 64)
				require.NoError(t, err, e)
				ended[v] = true
			}
		}
	}
	require.Len(t, woken, 1)
	parts := strings.Split(woken[0], "\x1f")
	require.Len(t, parts, 3, woken[0])
	require.Equal(t, []string{"wake", "2"}, parts[:2], "b's queue and band are woken")
	require.Equal(t, map[int64]bool{id("a"): true, id("x"): true, id("y"): true, id("z"): true}, ended)
	require.EqualValues(t, 3, n, "one done payload for a and x, one wake-up, one done payload for y and z")
}

// TestReleaseWakesAnIdleWorker: a dependent released by the engine's finish reaches an idle
// worker through the wake-up sent after the commit (NotifyDoneMany), not through its poll: the
// worker serving b's queue polls every 10 minutes, and b's queue is served by no other worker.
// (With NotifyDoneSettled left out, b waits for the poll and the test times out.)
func TestReleaseWakesAnIdleWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 12 })
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("wake", nil).
		Add("a", stepArgs{Name: "a"}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}, InsertOpts: jobs.InsertOpts{Queue: "wake"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)

	ran := make(chan string, 4)
	handler := func(_ context.Context, job *generics.Job[stepArgs]) error {
		ran <- job.Args.Name
		return nil
	}
	// idle serves b's queue alone; its first claim finds b waiting, then it polls every 10 min.
	icfg := fastConfig(map[string]worker.QueueConfig{"wake": {Concurrency: 2}})
	icfg.FetchPollMin, icfg.FetchPollMax = 10*time.Minute, 10*time.Minute
	icfg.ReclaimEvery = time.Hour
	idle, err := worker.New(pool, icfg)
	require.NoError(t, err)
	worker.MustRegister(idle, handler, nil)
	startWorker(t, idle)
	waitFor(t, 30*time.Second, "the idle worker's empty claim", func() bool { return idle.Stats().EmptyClaims >= 1 })
	require.Equal(t, generics.JobStateWaiting, getJob(t, c, res.Tasks["b"].ID).State)

	// runner serves a's queue; its finish of a releases b.
	runner, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{jobs.DefaultQueue: {Concurrency: 2}}))
	require.NoError(t, err)
	worker.MustRegister(runner, handler, nil)
	startWorker(t, runner)

	got := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for len(got) < 2 {
		select {
		case n := <-ran:
			got[n] = true
		case <-deadline:
			t.Fatalf("ran %v: b was released but the idle worker was not woken", keys(got))
		}
	}
	waitFor(t, 30*time.Second, "b succeeded", func() bool {
		return getJob(t, c, res.Tasks["b"].ID).State == generics.JobStateSucceeded
	})
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestMassReleaseNotifiesInItsTransaction: a settle round that resolves 1,000 edges or more (a
// fan-out's root) keeps its NOTIFY in the finish's transaction, so that NotifyDoneMany need not
// read 100,000 dependents back after the commit (it reads at most 1,000 a job): the wake-up of
// the root's 1,000 released tasks arrives before the sentinel notified after the commit.
func TestMassReleaseNotifiesInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("mass", nil).Add("root", stepArgs{Name: "root"}, nil)
	for i := range 1000 {
		wf.Add(fmt.Sprintf("t%d", i), stepArgs{Name: "t"}, &jobs.TaskOpts{DependsOn: []string{"root"}, InsertOpts: jobs.InsertOpts{Queue: "mass"}})
	}
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	root := res.Tasks["root"].ID

	listen, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listen.Release()
	_, err = listen.Exec(ctx, "LISTEN tenure_jobs")
	require.NoError(t, err)
	tok := uuid.New()
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'running', attempts = 1, generation = 1, claim_token = $2,
		locked_by = 't', attempted_at = now(), locked_until = now() + interval '1 hour' WHERE id = $1`, root, tok)
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	rows, err := gen.New(conn).CompleteMany(ctx, gen.CompleteManyParams{Ids: []int64{root}, Tokens: []uuid.UUID{tok}, Outputs: [][]byte{[]byte("null")}})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	_, err = conn.Exec(ctx, "SELECT pg_notify('tenure_jobs', 'sentinel')")
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := listen.Conn().WaitForNotification(wctx)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(n.Payload, "mass\x1f"), "the mass release's wake-up comes with its commit, got %q", n.Payload)
	var ready int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE queue = 'mass' AND state = 'ready'").Scan(&ready))
	require.Equal(t, 1000, ready)
}
