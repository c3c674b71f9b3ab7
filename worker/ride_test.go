package worker_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// These tests cover completions that ride on claims (worker/claim.go, "Completions ride on
// claims"): a queue's successes are completed by its next claim, in the claim's transaction.

// stmtTracer is a pgx tracer for an engine pool: it counts the CompleteMany statements sent on
// their own and those sent in a pipeline (a claim's), and calls the hooks a test sets.
type stmtTracer struct {
	alone, inBatch atomic.Int64
	// onQuery runs before a statement sent on its own; onBatch before a pipeline is sent (sqls:
	// its statements); onBatchQuery after each statement's results of a pipeline were read.
	onQuery      func(conn *pgx.Conn, sql string)
	onBatch      func(conn *pgx.Conn, sqls []string)
	onBatchQuery func(conn *pgx.Conn, sql string)
	// onQueryEnd runs after a statement sent on its own returned.
	onQueryEnd func(sql string)
}

type tracedSQLKey struct{}

func isCompleteMany(sql string) bool { return strings.Contains(sql, "name: CompleteMany") }

func (s *stmtTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if isCompleteMany(d.SQL) {
		s.alone.Add(1)
	}
	if s.onQuery != nil {
		s.onQuery(conn, d.SQL)
	}
	if s.onQueryEnd != nil {
		ctx = context.WithValue(ctx, tracedSQLKey{}, d.SQL)
	}
	return ctx
}

func (s *stmtTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if sql, ok := ctx.Value(tracedSQLKey{}).(string); ok && s.onQueryEnd != nil {
		s.onQueryEnd(sql)
	}
}

func (s *stmtTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, 0, d.Batch.Len())
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
		if isCompleteMany(q.SQL) {
			s.inBatch.Add(1)
		}
	}
	if s.onBatch != nil {
		s.onBatch(conn, sqls)
	}
	return ctx
}

func (s *stmtTracer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	if s.onBatchQuery != nil {
		s.onBatchQuery(conn, d.SQL)
	}
}

func (s *stmtTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// tracedEnginePool is an engine pool (worker.Config.EnginePool) on pool's database whose
// connections report to tr.
func tracedEnginePool(t *testing.T, pool *pgxpool.Pool, tr *stmtTracer) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Tracer = tr
	cfg.MaxConns = 10
	eng, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(eng.Close)
	return eng
}

// TestCompletionsRideOnClaims: a chain of workflow tasks on a queue with one slot and a
// FinishLinger of a minute. Each task's completion rides on the claim that follows it, in one
// transaction: that claim's CompleteMany releases the next task (the release trigger), and the
// claim's own statement then takes it. No completion is written on its own, every outcome is
// reported as the finishers report it, and the done signal wakes a waiter. Before completions
// rode on claims the chain stalled: the finishers held each lone completion for FinishLinger.
func TestCompletionsRideOnClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	tr := &stmtTracer{}
	rec := &recorder{}
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 1, Claimers: 1}})
	cfg.EnginePool = tracedEnginePool(t, pool, tr)
	cfg.FinishLinger = time.Second
	cfg.OnOutcome = rec.outcome
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var order []int
	var mu sync.Mutex
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[noopArgs]) error {
		mu.Lock()
		order = append(order, j.Args.N)
		mu.Unlock()
		return worker.SetOutput(ctx, map[string]int{"n": j.Args.N})
	}, nil)

	c := newClient(t, pool, w)
	// Started before the workflow is inserted, and past the listener's connect: its resync
	// heartbeats every running job at once (missed cancel signals), and a heartbeat holding a
	// task's row while a claim carries its completion makes that completion busy, handed to the
	// finishers (correct, but not what this test counts). The connect also asks for a read of
	// the paused queues, which is what can be seen from here.
	startWorker(t, w)
	waitFor(t, 30*time.Second, "the listener's connect", func() bool { return worker.QueueStateReads(w) >= 1 })
	const tasks = 10
	wf := jobs.NewWorkflow("chain", nil).Add("t0", noopArgs{N: 0}, nil)
	for i := 1; i < tasks; i++ {
		wf.Add(fmt.Sprintf("t%d", i), noopArgs{N: i}, &jobs.TaskOpts{DependsOn: []string{fmt.Sprintf("t%d", i-1)}})
	}
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	last := res.Tasks[fmt.Sprintf("t%d", tasks-1)].ID
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Second)
		defer cancel()
		_, err := c.Wait(wctx, last)
		waited <- err
	}()

	waitFor(t, 40*time.Second, "every task to succeed (a lone completion must not wait for FinishLinger)", func() bool {
		return countState(t, pool, "succeeded") == tasks
	})
	require.NoError(t, <-waited, "the done signal of the last task")
	waitFor(t, 10*time.Second, "the outcomes", func() bool { _, o := rec.snapshot(); return len(o) == tasks })
	_, outcomes := rec.snapshot()
	for _, o := range outcomes {
		require.Equal(t, worker.OutcomeSucceeded, o.Transition)
		require.NoError(t, o.Err)
	}
	mu.Lock()
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, order)
	mu.Unlock()
	for name, r := range res.Tasks {
		got := getJob(t, c, r.ID)
		require.Equal(t, generics.JobStateSucceeded, got.State, name)
		require.JSONEq(t, fmt.Sprintf(`{"n": %s}`, strings.TrimPrefix(name, "t")), string(got.Output), "the output rides with the completion")
		require.EqualValues(t, 1, got.Generation, name)
	}
	st := w.Stats()
	require.EqualValues(t, tasks, st.Succeeded)
	require.EqualValues(t, tasks, st.FinishedOnClaims, "every completion landed in a claim's transaction (claims %d, empty %d, claim errors %d, finish busy %d, finish writes alone %d, last error %q)",
		st.Claims, st.EmptyClaims, st.ClaimErrors, st.FinishBusy, tr.alone.Load(), st.LastError)
	require.Zero(t, st.StaleRejected)
	require.Zero(t, tr.alone.Load(), "no completion was written on its own")
	require.Positive(t, tr.inBatch.Load())
}

// TestRideFailedClaimKeepsCompletions: the claim that carries a completion fails. Either its
// connection is killed (pg_terminate_backend) before the claim is sent, so the transaction
// never happens, or the claim commits and the reply is lost (the connection closed once the
// server is idle). Either way the completion is not lost: the finishers write it (or read back
// that it landed), and the outcome is this attempt's success, never a stale write. Both with
// one queue (the claim's own pipeline) and with two (the batched claim's).
func TestRideFailedClaimKeepsCompletions(t *testing.T) {
	t.Parallel()
	for _, queues := range []int{1, 2} {
		for _, fault := range []string{"terminated", "reply-lost"} {
			t.Run(fmt.Sprintf("%s-%dqueues", fault, queues), func(t *testing.T) {
				t.Parallel()
				testRideFault(t, fault, queues)
			})
		}
	}
}

func testRideFault(t *testing.T, fault string, queues int) {
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	tr := &stmtTracer{}
	// The engine's pool reaches the server through a proxy (the reply-lost fault uses it).
	pc := pool.Config().ConnConfig
	proxy := newTCPProxy(t, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
	ecfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	require.NoError(t, err)
	ecfg.ConnConfig.Host, ecfg.ConnConfig.Port = "127.0.0.1", proxy.port()
	ecfg.ConnConfig.Fallbacks, ecfg.ConnConfig.TLSConfig = nil, nil
	ecfg.ConnConfig.ConnectTimeout = 2 * time.Second
	ecfg.ConnConfig.Tracer = tr
	ecfg.MaxConns = 8
	eng, err := pgxpool.NewWithConfig(ctx, ecfg)
	require.NoError(t, err)
	t.Cleanup(eng.Close)
	t.Cleanup(proxy.restore)
	var armed atomic.Bool
	armed.Store(true)
	var claimConn atomic.Pointer[pgx.Conn]
	var hit atomic.Int64
	// The hooks run on the engine's goroutines: they report with t.Error, never t.Fatal.
	// backendGone waits (10 s at most) until the backend pid is gone, or only idle.
	backendGone := func(pid uint32, idleIsEnough bool) bool {
		q := "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
		if idleIsEnough {
			q += " AND state <> 'idle'"
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			var n int
			if err := pool.QueryRow(ctx, q, pid).Scan(&n); err != nil {
				t.Error(err)
				return false
			}
			if n == 0 {
				return true
			}
		}
		t.Errorf("backend %d still busy", pid)
		return false
	}
	switch fault {
	case "terminated":
		tr.onBatch = func(conn *pgx.Conn, sqls []string) {
			if !strings.Contains(strings.Join(sqls, "\n"), "name: CompleteMany") || !armed.CompareAndSwap(true, false) {
				return
			}
			pid := conn.PgConn().PID()
			var ok bool
			if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
				t.Errorf("pg_terminate_backend: %v %v", ok, err)
			}
			if backendGone(pid, false) {
				hit.Add(1)
			}
		}
	case "reply-lost":
		// The server commits the claim and its completion, and the reply is lost (the proxy
		// drops it; the test then closes that connection, and only that one: the finishers'
		// first write must find the job already succeeded).
		tr.onBatch = func(conn *pgx.Conn, sqls []string) {
			if strings.Contains(strings.Join(sqls, "\n"), "name: CompleteMany") && armed.CompareAndSwap(true, false) {
				proxy.dropReplies()
				claimConn.Store(conn)
				hit.Add(1)
			}
		}
	}
	rec := &recorder{}
	qs := map[string]worker.QueueConfig{"default": {Concurrency: 1, Claimers: 1}}
	if queues == 2 {
		qs["other"] = worker.QueueConfig{Concurrency: 1, Claimers: 1}
	}
	cfg := fastConfig(qs)
	cfg.EnginePool = eng
	cfg.OnOutcome = rec.outcome
	cfg.FinishRetryMax = 200 * time.Millisecond
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
	c := newClient(t, pool, w)
	// reply-lost: one job, so that the claim whose reply is lost owns nothing (its rows would
	// wait for their lease). terminated: the claim never ran, so it can carry on.
	n := 1
	if fault == "terminated" {
		n = 3
	}
	var ids []int64
	for i := range n {
		r, err := c.Insert(ctx, noopArgs{N: i}, nil)
		require.NoError(t, err)
		ids = append(ids, r.Job.ID)
	}
	startWorker(t, w)
	if fault == "reply-lost" {
		waitFor(t, 20*time.Second, "the claim carrying the completion", func() bool { return hit.Load() == 1 })
		waitFor(t, 20*time.Second, "the completion to commit", func() bool { return countState(t, pool, "succeeded") == n })
		// The claim now sees its connection fail, without ever having read the reply.
		_ = claimConn.Load().PgConn().Conn().Close()
		waitFor(t, 20*time.Second, "the claim to fail", func() bool { return w.Stats().ClaimErrors > 0 })
		proxy.restore()
	}
	waitFor(t, 30*time.Second, "every outcome", func() bool { _, o := rec.snapshot(); return len(o) == n })
	require.EqualValues(t, 1, hit.Load(), "the fault hit the claim that carried the completion")
	_, outcomes := rec.snapshot()
	for _, o := range outcomes {
		require.Equal(t, worker.OutcomeSucceeded, o.Transition)
		require.NoError(t, o.Err, "the completion is this attempt's success")
	}
	for _, id := range ids {
		got := getJob(t, c, id)
		require.Equal(t, generics.JobStateSucceeded, got.State)
		require.EqualValues(t, 1, got.Generation, "ran once")
	}
	st := w.Stats()
	t.Logf("completions on claims %d, claim errors %d, finish retries %d, alone %d, last error %s", st.FinishedOnClaims, st.ClaimErrors, st.FinishRetries, tr.alone.Load(), st.LastError)
	require.EqualValues(t, n, st.Succeeded)
	require.Zero(t, st.StaleRejected)
	require.Zero(t, st.FinishAbandoned)
	require.Positive(t, st.ClaimErrors, "the claim failed")
	require.Positive(t, tr.alone.Load(), "the finishers wrote the completion the failed claim carried")
	t.Logf("completions on claims %d, claim errors %d, finish retries %d", st.FinishedOnClaims, st.ClaimErrors, st.FinishRetries)
}

// TestRideWithoutClaimDue: completions that no claim takes still land by the finishers'
// FinishLinger mechanism. "idle": the queue's only claimer sleeps a minute after a short claim,
// so no claim is in flight when the handler returns; "claim-held": a claim is in flight (held
// by the test) when the handler returns, and the completion is handed to the finishers once
// FinishLinger has passed, without waiting for that claim.
func TestRideWithoutClaimDue(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"idle", "claim-held"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
			tr := &stmtTracer{}
			var hold atomic.Bool
			held := make(chan struct{}, 1)
			release := make(chan struct{})
			// The listener's first connect wakes the queue (a claim): "idle" waits until that
			// claim has returned, so that no claim is in flight when the handler returns.
			var listened atomic.Bool
			var claimsAfterListen, claimsEnded atomic.Int64
			tr.onQuery = func(_ *pgx.Conn, sql string) {
				if strings.Contains(sql, "LISTEN ") {
					listened.Store(true)
				}
				if strings.Contains(sql, "name: ClaimOrdered") && listened.Load() {
					claimsAfterListen.Add(1)
				}
				if strings.Contains(sql, "name: ClaimOrdered") && hold.CompareAndSwap(true, false) {
					held <- struct{}{}
					<-release
				}
			}
			tr.onQueryEnd = func(sql string) {
				if strings.Contains(sql, "name: ClaimOrdered") && listened.Load() {
					claimsEnded.Add(1)
				}
			}
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			rec := &recorder{}
			cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2, Claimers: 1}})
			cfg.EnginePool = tracedEnginePool(t, pool, tr)
			cfg.FinishLinger = 100 * time.Millisecond
			if how == "idle" {
				cfg.FetchPollMin, cfg.FetchPollMax = time.Minute, time.Minute
			}
			cfg.OnOutcome = rec.outcome
			w, err := worker.New(pool, cfg)
			require.NoError(t, err)
			started := make(chan struct{}, 1)
			finish := make(chan struct{})
			worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error {
				started <- struct{}{}
				<-finish
				return nil
			}, nil)
			c := newClient(t, pool, w)
			startWorker(t, w)
			if how == "idle" {
				waitFor(t, 20*time.Second, "the listener's wake-up claim to return", func() bool {
					n := claimsAfterListen.Load()
					return n > 0 && claimsEnded.Load() >= n
				})
			}
			row, err := c.Insert(ctx, noopArgs{N: 1}, nil)
			require.NoError(t, err)
			<-started
			if how == "claim-held" {
				hold.Store(true)
				select {
				case <-held:
				case <-time.After(20 * time.Second):
					t.Fatal("no claim started")
				}
			}
			close(finish)
			waitFor(t, 20*time.Second, "the completion to land without a claim", func() bool {
				return getJob(t, c, row.Job.ID).State == generics.JobStateSucceeded
			})
			if how == "claim-held" {
				close(release)
			}
			waitFor(t, 10*time.Second, "the outcome", func() bool { _, o := rec.snapshot(); return len(o) == 1 })
			_, outcomes := rec.snapshot()
			require.NoError(t, outcomes[0].Err)
			st := w.Stats()
			require.Zero(t, st.FinishedOnClaims)
			require.EqualValues(t, 1, tr.alone.Load(), "the finishers wrote it")
		})
	}
}
