package worker_test

// Chaos tests of the worker engine (docs/contract.md §10, scenarios 4, 5 and 7): workers crash
// (SIGKILL of a child process), stall past their lease (SIGSTOP/SIGCONT), ignore their context,
// lose their lease under them, and lose the database while finishing. Every test runs on its
// own database; children are killed in t.Cleanup.

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// chaosPool returns a small pool on a fresh migrated database and the database's URL (for
// child processes).
func chaosPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	return pool, pool.Config().ConnString()
}

func getJob(t testing.TB, c *jobs.Client, id int64) *generics.JobRow {
	t.Helper()
	r, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	return r
}

// txClaimCount runs the claim statement in a transaction it rolls back: how many jobs a
// worker could claim right now, without claiming them.
func txClaimCount(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := gen.New(tx).ClaimStrict(ctx, gen.ClaimStrictParams{WorkerID: "probe", Queue: "default", Batch: 100, Kinds: []string{"chaos", "effect", "noop"}, KindVersions: []int32{1, 1, 1}, KindLeaseMs: []int32{0, 0, 0}})
	require.NoError(t, err)
	n := 0
	for _, r := range rows {
		if r.ID != nil { // else the one feedback-only row of a claim that owned nothing
			n++
		}
	}
	return n
}

// waitLeaseExpired waits until the database clock has passed the job's locked_until.
func waitLeaseExpired(t testing.TB, pool *pgxpool.Pool, id int64, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "lease expiry on the database clock", func() bool {
		var expired bool
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT coalesce(locked_until < clock_timestamp(), true) FROM tenure.jobs WHERE id = $1", id).Scan(&expired))
		return expired
	})
}

// attemptRec is what a test-side handler saw of one attempt.
type attemptRec struct {
	Attempt    int
	Generation int64
	Token      uuid.UUID
	ClaimedAt  time.Time
}

// recorder collects attempts and outcomes seen by test-side workers.
type recorder struct {
	mu       sync.Mutex
	attempts []attemptRec
	outcomes []worker.Outcome
}

func (r *recorder) attempt(m *generics.JobRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, attemptRec{m.Attempt, m.Generation, *m.ClaimToken, *m.AttemptedAt})
}

func (r *recorder) outcome(o worker.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, o)
}

func (r *recorder) snapshot() ([]attemptRec, []worker.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attemptRec(nil), r.attempts...), append([]worker.Outcome(nil), r.outcomes...)
}

// completingWorker starts a test-side worker whose chaos handler records the attempt and
// succeeds. Its reclaim sweep runs every 100ms and reclaims with fastRetry's backoff.
func completingWorker(t *testing.T, pool *pgxpool.Pool, rec *recorder) *worker.Worker {
	t.Helper()
	cfg := fastConfig(nil)
	cfg.OnOutcome = rec.outcome
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[chaosArgs]) error {
		rec.attempt(job.JobRow)
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	startWorker(t, w)
	return w
}

// ---------------------------------------------------------------------------------------------
// Scenario 4: crash after the claim commits, before work.
// ---------------------------------------------------------------------------------------------

// TestChaosCrashAfterClaimCommit: a worker process claims a job and is SIGKILLed before doing
// any work. The claim committed, so the job stays running (owned by the dead worker) and is
// neither claimable nor reclaimable until locked_until passes on the database clock; then the
// sweep returns it to ready as a failed attempt (attempts consumed, LEASE_EXPIRED, in the
// error history) and it is re-run as generation 2.
func TestChaosCrashAfterClaimCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := chaosPool(t)
	c := newClient(t, pool, nil)
	row, err := c.Insert(ctx, chaosArgs{Tag: "crash-after-claim"}, &jobs.InsertOpts{Lease: 2 * time.Second, MaxAttempts: 5})
	require.NoError(t, err)

	child := startChild(t, childOpts{DB: url, Handler: "block", ID: "doomed-worker"})
	f := child.waitLine(t, 20*time.Second, "claimed", forJob(row.Job.ID))
	require.Equal(t, "1", f[2], "first claim is generation 1")
	child.killAndWait(t)

	got := getJob(t, c, row.Job.ID)
	require.Equal(t, generics.JobStateRunning, got.State, "a committed claim survives its worker")
	require.Equal(t, 1, got.Attempt)
	require.EqualValues(t, 1, got.Generation)
	require.Equal(t, "doomed-worker", got.LockedBy)
	require.Equal(t, f[4], got.ClaimToken.String())
	require.NotNil(t, got.LockedUntil)
	leaseEnd := *got.LockedUntil
	var leaseLeft bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT $1::timestamptz > clock_timestamp()", leaseEnd).Scan(&leaseLeft))

	// A sweeper that claims nothing (it works another queue) and never sweeps on its own:
	// the test drives ReclaimExpired.
	cfg := fastConfig(map[string]worker.QueueConfig{"elsewhere": {}})
	cfg.ReclaimEvery = time.Hour
	sweeper, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(sweeper, func(context.Context, *generics.Job[chaosArgs]) error { return nil },
		&worker.HandlerOptions{Retry: fastRetry})
	startWorker(t, sweeper)

	early := 0
	deadline := time.Now().Add(15 * time.Second)
	for {
		require.Zero(t, txClaimCount(t, pool), "a running job with a live lease must not be claimable")
		n, err := sweeper.ReclaimExpired(ctx)
		require.NoError(t, err)
		if n > 0 {
			require.Equal(t, 1, n)
			break
		}
		early++
		cur := getJob(t, c, row.Job.ID)
		require.Equal(t, generics.JobStateRunning, cur.State)
		require.EqualValues(t, 1, cur.Generation)
		require.Equal(t, 1, cur.Attempt)
		require.False(t, time.Now().After(deadline), "the expired lease was never reclaimed")
		time.Sleep(50 * time.Millisecond)
	}
	if leaseLeft {
		require.Positive(t, early, "reclaim must not happen while the lease is live")
	}

	got = getJob(t, c, row.Job.ID)
	require.Equal(t, generics.JobStateReady, got.State)
	require.Equal(t, 1, got.Attempt, "the crashed attempt is consumed")
	require.EqualValues(t, 1, got.Generation)
	require.Nil(t, got.ClaimToken)
	require.Empty(t, got.LockedBy)
	require.Equal(t, "LEASE_EXPIRED", got.LastErrorCode)
	require.Len(t, got.Errors, 1)
	require.Equal(t, "LEASE_EXPIRED", got.Errors[0].Code)
	require.Equal(t, 1, got.Errors[0].Attempt)
	require.EqualValues(t, 1, got.Errors[0].Generation)
	require.True(t, got.Errors[0].At.After(leaseEnd), "reclaimed at %v, lease ended %v (database clock)", got.Errors[0].At, leaseEnd)

	rec := &recorder{}
	runner := completingWorker(t, pool, rec)
	waitFor(t, 15*time.Second, "the re-run to succeed", func() bool { return countState(t, pool, "succeeded") == 1 })
	got = getJob(t, c, row.Job.ID)
	require.EqualValues(t, 2, got.Generation)
	require.Equal(t, 2, got.Attempt)
	require.True(t, got.AttemptedAt.After(leaseEnd))
	attempts, _ := rec.snapshot()
	require.Len(t, attempts, 1)
	require.Equal(t, 2, attempts[0].Attempt)
	require.EqualValues(t, 2, attempts[0].Generation)
	require.Equal(t, *got.ClaimToken, attempts[0].Token)
	require.NoError(t, stopWorker(t, runner, 5*time.Second))
	require.EqualValues(t, 1, runner.Stats().Succeeded)
	require.Zero(t, runner.Stats().StaleRejected)
}

// ---------------------------------------------------------------------------------------------
// Scenario 4: crash before the claim commits.
// ---------------------------------------------------------------------------------------------

// TestChaosCrashBeforeClaimCommit: the claim statement ran but its transaction never
// committed (the claiming process is SIGKILLed, or its backend terminated). While it is open
// the row is locked: another claim skips it and a plain read sees it ready. After the crash
// the job is claimable at once, with no attempt consumed and no lease to wait for.
func TestChaosCrashBeforeClaimCommit(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"child-killed", "backend-terminated"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, url := chaosPool(t)
			c := newClient(t, pool, nil)
			row, err := c.Insert(ctx, chaosArgs{Tag: how}, &jobs.InsertOpts{Lease: 20 * time.Second})
			require.NoError(t, err)

			var pid int
			var crash func()
			switch how {
			case "child-killed":
				child := startChild(t, childOpts{Mode: "claim-uncommitted", DB: url, ID: "doomed-claimer"})
				f := child.waitLine(t, 20*time.Second, "claimed-uncommitted", forJob(row.Job.ID))
				require.Equal(t, "1", f[2], "inside the open claim transaction the job is generation 1")
				pid = int(atoi64(f[3]))
				crash = func() { child.killAndWait(t) }
			case "backend-terminated":
				conn, err := pgx.Connect(ctx, url)
				require.NoError(t, err)
				t.Cleanup(func() { _ = conn.Close(context.Background()) })
				tx, err := conn.Begin(ctx)
				require.NoError(t, err)
				require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
				rows, err := gen.New(tx).ClaimStrict(ctx, gen.ClaimStrictParams{WorkerID: "doomed-claimer", Queue: "default", Batch: 1, Kinds: []string{"chaos", "effect", "noop"}, KindVersions: []int32{1, 1, 1}, KindLeaseMs: []int32{0, 0, 0}})
				require.NoError(t, err)
				require.Len(t, rows, 1)
				require.NotNil(t, rows[0].ID)
				require.EqualValues(t, 1, *rows[0].Generation)
				crash = func() {
					var ok bool
					require.NoError(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
					require.True(t, ok)
				}
			}

			// The claim is not committed: others see the job ready and cannot take it.
			got := getJob(t, c, row.Job.ID)
			require.Equal(t, generics.JobStateReady, got.State)
			require.Zero(t, got.Attempt)
			require.Zero(t, got.Generation)
			require.Zero(t, txClaimCount(t, pool), "SKIP LOCKED skips the row locked by the open claim")

			crash()
			crashed := time.Now()
			waitFor(t, 10*time.Second, "the claiming backend to go away", func() bool {
				var n int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n))
				return n == 0
			})
			got = getJob(t, c, row.Job.ID)
			require.Equal(t, generics.JobStateReady, got.State)
			require.Zero(t, got.Attempt, "an uncommitted claim consumes no attempt")
			require.Zero(t, got.Generation)

			rec := &recorder{}
			w := completingWorker(t, pool, rec)
			waitFor(t, 10*time.Second, "the job to run", func() bool { return countState(t, pool, "succeeded") == 1 })
			took := time.Since(crashed)
			require.Less(t, took, 20*time.Second, "claimable at once, not after a lease")
			got = getJob(t, c, row.Job.ID)
			require.EqualValues(t, 1, got.Generation)
			require.Equal(t, 1, got.Attempt)
			require.Empty(t, got.Errors)
			require.Empty(t, got.LastErrorCode)
			attempts, _ := rec.snapshot()
			require.Len(t, attempts, 1)
			require.Equal(t, 1, attempts[0].Attempt)
			require.NoError(t, stopWorker(t, w, 5*time.Second))
			require.Zero(t, w.Stats().Reclaimed)
			t.Logf("claimed and ran %v after the crash", took.Round(time.Millisecond))
		})
	}
}

// ---------------------------------------------------------------------------------------------
// Scenario 5: a stale worker (SIGSTOP past its lease) wakes up.
// ---------------------------------------------------------------------------------------------

// TestChaosStaleWorkerAfterSIGSTOP: worker A (a child) claims a job and is SIGSTOPped past
// its lease; worker B reclaims it and completes generation 2. When A is SIGCONTed, its
// write is fenced out: its completion ("completion"), its retry ("retry") and its heartbeat
// ("heartbeat": A's handler context is cancelled with cause ErrLeaseLost) change 0 rows, are
// reported stale, and the job keeps B's result and B's claim token.
func TestChaosStaleWorkerAfterSIGSTOP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, handler, transition string
		leaseLost                 bool
	}{
		{"completion", "complete-on-go", "succeeded", false},
		{"retry", "fail-on-go", "retried", false},
		{"heartbeat", "wait-ctx", "retried", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, url := chaosPool(t)
			c := newClient(t, pool, nil)
			row, err := c.Insert(ctx, chaosArgs{Tag: tc.name}, &jobs.InsertOpts{Lease: 2 * time.Second, MaxAttempts: 5})
			require.NoError(t, err)

			a := startChild(t, childOpts{DB: url, Handler: tc.handler, ID: "worker-a"})
			fa := a.waitLine(t, 20*time.Second, "claimed", forJob(row.Job.ID))
			require.Equal(t, "1", fa[2])
			tokenA := fa[4]
			a.pause()

			// B starts only now, so A got the job; B's sweep reclaims it once A's lease is gone.
			rec := &recorder{}
			b := completingWorker(t, pool, rec)
			waitFor(t, 20*time.Second, "B to re-run and complete the job", func() bool {
				return countState(t, pool, "succeeded") == 1
			})
			// OnOutcome runs once B's loop settles the committed finish, a moment after the
			// row shows it.
			waitFor(t, 10*time.Second, "B's outcome", func() bool { _, o := rec.snapshot(); return len(o) == 1 })
			won := getJob(t, c, row.Job.ID)
			require.EqualValues(t, 2, won.Generation)
			require.Equal(t, 2, won.Attempt)
			require.NotEqual(t, tokenA, won.ClaimToken.String())
			require.Len(t, won.Errors, 1)
			require.Equal(t, "LEASE_EXPIRED", won.Errors[0].Code)
			require.EqualValues(t, 1, won.Errors[0].Generation)
			attempts, outcomes := rec.snapshot()
			require.Len(t, attempts, 1)
			require.EqualValues(t, 2, attempts[0].Generation)
			require.Equal(t, *won.ClaimToken, attempts[0].Token)
			require.Len(t, outcomes, 1)
			require.NoError(t, outcomes[0].Err, "B's completion changes 1 row")
			require.EqualValues(t, 1, b.Stats().Reclaimed)

			// A wakes up.
			a.send(t, "go")
			a.resume()
			if tc.leaseLost {
				f := a.waitLine(t, 15*time.Second, "ctx-done", forJob(row.Job.ID, 1))
				require.Equal(t, "true", kv(f, "lease_lost"), "A's handler context is cancelled with cause ErrLeaseLost: %v", f)
			}
			o := a.waitLine(t, 15*time.Second, "outcome", forJob(row.Job.ID, 1))
			require.Equal(t, tc.transition, o[3], "A's %s: %v", tc.transition, o)
			require.Equal(t, "true", kv(o, "stale"), "A's late %s must be rejected as stale: %v", tc.transition, o)
			a.send(t, "stats")
			s := a.waitLine(t, 10*time.Second, "stats", nil)
			require.EqualValues(t, 1, kvInt(s, "stale"), "A counts one stale write: %v", s)
			require.Zero(t, kvInt(s, "succeeded"))
			if tc.leaseLost {
				require.EqualValues(t, 1, kvInt(s, "leases_lost"))
			}

			after := getJob(t, c, row.Job.ID)
			require.Equal(t, generics.JobStateSucceeded, after.State)
			require.EqualValues(t, 2, after.Generation)
			require.Equal(t, *won.ClaimToken, *after.ClaimToken, "the job keeps the new generation's token")
			require.Equal(t, won.UpdatedAt, after.UpdatedAt, "A wrote nothing")
			require.Equal(t, won.FinishedAt, after.FinishedAt)
			require.Equal(t, won.Attempt, after.Attempt)
			require.Len(t, after.Errors, 1)
		})
	}
}

// ---------------------------------------------------------------------------------------------
// Heartbeats (docs/contract.md §3, §10 scenario 7)
// ---------------------------------------------------------------------------------------------

// TestChaosHeartbeatKeepsLongJobAlive: a 4 s handler on a 1 s lease is kept by heartbeats:
// the lease end moves forward, concurrent sweeps reclaim nothing, and the job succeeds as
// generation 1.
func TestChaosHeartbeatKeepsLongJobAlive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := chaosPool(t)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	started := make(chan struct{}, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error {
		started <- struct{}{}
		select {
		case <-time.After(job.Args.Sleep):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, &worker.HandlerOptions{Retry: fastRetry, MaxAttempts: 3})
	c := newClient(t, pool, w)
	row, err := c.Insert(ctx, slowArgs{Sleep: 4 * time.Second}, &jobs.InsertOpts{Lease: time.Second})
	require.NoError(t, err)
	startWorker(t, w)
	<-started

	var first, last time.Time
	for {
		n, err := w.ReclaimExpired(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "a heartbeated lease must never expire")
		got := getJob(t, c, row.Job.ID)
		if got.State != generics.JobStateRunning {
			break
		}
		require.EqualValues(t, 1, got.Generation)
		if first.IsZero() {
			first = *got.LockedUntil
		}
		last = *got.LockedUntil
		time.Sleep(100 * time.Millisecond)
	}
	require.Greater(t, last.Sub(first), 2*time.Second, "heartbeats moved the lease end forward")
	got := getJob(t, c, row.Job.ID)
	require.Equal(t, generics.JobStateSucceeded, got.State)
	require.EqualValues(t, 1, got.Generation)
	require.Equal(t, 1, got.Attempt)
	require.Empty(t, got.Errors)
	require.NoError(t, stopWorker(t, w, 5*time.Second))
	st := w.Stats()
	require.EqualValues(t, 1, st.Succeeded)
	require.Zero(t, st.Reclaimed)
	require.Zero(t, st.LeasesLost)
	require.Zero(t, st.StaleRejected)
	require.GreaterOrEqual(t, st.HeartbeatRows, int64(5), "about one heartbeat per lease/3: %+v", st)
}

// TestChaosHeartbeatAfterLeaseLoss (scenario 7): another owner takes the job under worker A
// (its claim token replaced, or the job finished). A's next heartbeat changes 0 rows, A's
// handler context is cancelled with cause ErrLeaseLost, an effect attempted afterwards is
// refused without running, and A's finish is a stale write that leaves the job as the other
// owner set it.
func TestChaosHeartbeatAfterLeaseLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, takeover string }{
		{"token-replaced", `UPDATE tenure.jobs SET claim_token = gen_random_uuid(), generation = generation + 1,
			locked_by = 'usurper', locked_until = now() + interval '1 minute' WHERE id = $1`},
		{"finished-by-other", `UPDATE tenure.jobs SET state = 'succeeded', locked_by = NULL, locked_until = NULL,
			finished_at = now() WHERE id = $1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _ := chaosPool(t)
			rec := &recorder{}
			cfg := fastConfig(nil)
			cfg.OnOutcome = rec.outcome
			w, err := worker.New(pool, cfg)
			require.NoError(t, err)
			started := make(chan *generics.JobRow, 1)
			type seen struct {
				cause     error
				effectErr error
				effectRan bool
			}
			done := make(chan seen, 1)
			worker.MustRegister(w, func(ctx context.Context, job *generics.Job[chaosArgs]) error {
				started <- job.JobRow
				<-ctx.Done()
				var s seen
				s.cause = context.Cause(ctx)
				_, s.effectErr = worker.Effect(ctx, job.JobRow, "after-loss", func(context.Context, worker.EffectCall) (int, error) {
					s.effectRan = true
					return 1, nil
				})
				done <- s
				return s.cause
			}, &worker.HandlerOptions{Retry: fastRetry})
			c := newClient(t, pool, w)
			row, err := c.Insert(ctx, chaosArgs{Tag: tc.name}, &jobs.InsertOpts{Lease: 3 * time.Second})
			require.NoError(t, err)
			startWorker(t, w)
			meta := <-started
			require.EqualValues(t, 1, meta.Generation)

			tag, err := pool.Exec(ctx, tc.takeover, row.Job.ID)
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected())
			taken := getJob(t, c, row.Job.ID)

			var s seen
			select {
			case s = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("the handler's context was not cancelled after the lease was lost")
			}
			require.Equal(t, worker.ErrLeaseLost, s.cause, "context.Cause(ctx) == worker.ErrLeaseLost")
			require.False(t, s.effectRan, "no side effect after the lease is lost")
			require.Error(t, s.effectErr)

			waitFor(t, 10*time.Second, "A's finish", func() bool { _, o := rec.snapshot(); return len(o) == 1 })
			_, outcomes := rec.snapshot()
			o := outcomes[0]
			var stale *worker.StaleWriteError
			require.ErrorAs(t, o.Err, &stale)
			require.ErrorIs(t, o.Err, worker.ErrLostOwnership)
			require.EqualValues(t, 1, o.Job.Generation)
			require.Equal(t, "retried", o.Transition)
			require.Equal(t, worker.CodeLeaseExpired, o.Code)
			st := w.Stats()
			require.EqualValues(t, 1, st.LeasesLost)
			require.EqualValues(t, 1, st.StaleRejected)
			require.Zero(t, st.Retried)

			after := getJob(t, c, row.Job.ID)
			require.Equal(t, taken.State, after.State)
			require.Equal(t, taken.Generation, after.Generation)
			require.Equal(t, taken.ClaimToken, after.ClaimToken)
			require.Equal(t, taken.LockedBy, after.LockedBy)
			require.Equal(t, taken.UpdatedAt, after.UpdatedAt, "A wrote nothing")
			require.Empty(t, after.Errors)
			var effects int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.effects").Scan(&effects))
			require.Zero(t, effects)
		})
	}
}

// ---------------------------------------------------------------------------------------------
// A handler that ignores its context.
// ---------------------------------------------------------------------------------------------

// TestChaosStuckHandlerIsReclaimedAndFencedOut: a handler sleeps 3 s ignoring its context
// (timeout 300ms, grace 200ms, lease 1s). The engine declares it stuck, stops heartbeating it,
// its lease expires and the job is reclaimed (LEASE_EXPIRED) and re-run by the same worker
// while the first handler still sleeps. The first handler's late return is fenced out: the
// job's final state is the second attempt's.
func TestChaosStuckHandlerIsReclaimedAndFencedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := chaosPool(t)
	rec := &recorder{}
	cfg := fastConfig(nil)
	cfg.StuckGrace = 200 * time.Millisecond
	cfg.OnOutcome = rec.outcome
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var firstReturned, secondStarted atomic.Int64 // unix nanos
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[chaosArgs]) error {
		rec.attempt(job.JobRow)
		if job.Attempt == 1 {
			time.Sleep(3 * time.Second) // ignores ctx
			firstReturned.Store(time.Now().UnixNano())
			return nil // a "success" that must be discarded
		}
		secondStarted.Store(time.Now().UnixNano())
		return nil
	}, &worker.HandlerOptions{Timeout: 300 * time.Millisecond, Retry: fastRetry, MaxAttempts: 5})
	c := newClient(t, pool, w)
	row, err := c.Insert(ctx, chaosArgs{Tag: "stuck"}, &jobs.InsertOpts{Lease: time.Second})
	require.NoError(t, err)
	startWorker(t, w)

	waitFor(t, 15*time.Second, "the second attempt to succeed", func() bool { return countState(t, pool, "succeeded") == 1 })
	won := getJob(t, c, row.Job.ID)
	require.EqualValues(t, 2, won.Generation)
	require.Equal(t, 2, won.Attempt)
	require.Len(t, won.Errors, 1)
	require.Equal(t, "LEASE_EXPIRED", won.Errors[0].Code)
	require.EqualValues(t, 1, won.Errors[0].Generation)

	waitFor(t, 15*time.Second, "the stuck handler's late finish", func() bool {
		st := w.Stats()
		return st.LateFinishes == 1 && st.StaleRejected == 1
	})
	require.Less(t, secondStarted.Load(), firstReturned.Load(), "the job was re-run while the stuck handler still held its goroutine")
	st := w.Stats()
	require.EqualValues(t, 1, st.Stuck)
	require.EqualValues(t, 1, st.Reclaimed)
	require.EqualValues(t, 1, st.Succeeded)
	require.Zero(t, st.Retried)

	after := getJob(t, c, row.Job.ID)
	require.Equal(t, generics.JobStateSucceeded, after.State)
	require.EqualValues(t, 2, after.Generation)
	require.Equal(t, *won.ClaimToken, *after.ClaimToken)
	require.Equal(t, won.UpdatedAt, after.UpdatedAt, "the late return wrote nothing")
	require.Len(t, after.Errors, 1)

	_, outcomes := rec.snapshot()
	require.Len(t, outcomes, 2)
	byGen := map[int64]worker.Outcome{}
	for _, o := range outcomes {
		byGen[o.Job.Generation] = o
	}
	require.NoError(t, byGen[2].Err)
	require.Equal(t, "succeeded", byGen[2].Transition)
	require.ErrorIs(t, byGen[1].Err, worker.ErrLostOwnership)
	require.Equal(t, worker.CodeTimeout, byGen[1].Code, "a stuck handler's late result is discarded as a timeout")
}

// ---------------------------------------------------------------------------------------------
// The database becomes unreachable while a finish is being written.
// ---------------------------------------------------------------------------------------------

// tcpProxy forwards 127.0.0.1:<port> to PostgreSQL and can cut every connection (and refuse
// new ones), or silently drop the server's replies.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	down    bool // cut: close every connection, accept-and-close new ones
	swallow bool // drop the reply to the next completion of one job (and the rest of its connection)
	hole    bool // half-open network: every byte in either direction is dropped, no RST
	conns   map[net.Conn]struct{}
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			cl, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.track(cl) {
				continue
			}
			go p.serve(cl)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *tcpProxy) port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// track registers c, or closes it when the proxy is down.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) swallowing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.swallow
}

func (p *tcpProxy) holed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hole
}

// blackhole makes the network half-open: connections stay established, but nothing gets
// through in either direction (no RST, no FIN), as when a link or a NAT silently drops
// packets. New connections are accepted and then hang the same way. restore heals it.
func (p *tcpProxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
}

// copyUnlessHoled copies src to dst, dropping everything while the proxy is blackholed.
func (p *tcpProxy) copyUnlessHoled(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.holed() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tcpProxy) serve(cl net.Conn) {
	defer cl.Close()
	srv, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil || !p.track(srv) {
		return
	}
	defer srv.Close()
	go func() {
		p.copyUnlessHoled(srv, cl)
		_ = srv.Close()
		_ = cl.Close()
	}()
	buf := make([]byte, 32<<10)
	blackholed := false
	for {
		n, err := srv.Read(buf)
		if n > 0 && !blackholed && p.swallowing() && completionReply(buf[:n]) {
			// The reply to the completion of one job: drop it and everything after it on
			// this connection.
			blackholed = true
		}
		if n > 0 && !blackholed && !p.holed() {
			if _, werr := cl.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every proxied connection and refuses new ones until restore.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down, p.swallow, p.hole = true, false, false
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down, p.swallow, p.hole = false, false, false
}

// completionReply reports whether b holds the reply to a CompleteMany that wrote one job: one
// row of four binary columns (DataRow 'D', length 33, 4 fields: the int8 id, the bool busy =
// false, the bool deleted = false, the bool settles = false: a job without dependents), then
// CommandComplete "SELECT 1" (the statement is a CTE ending in a SELECT). A busy reply (the row
// was locked: nothing written) is let through; a claim says "UPDATE n".
func completionReply(b []byte) bool {
	head := []byte("D\x00\x00\x00\x21\x00\x04\x00\x00\x00\x08")
	i := bytes.Index(b, head)
	if i < 0 || len(b) < i+len(head)+8+15 {
		return false
	}
	flags := b[i+len(head)+8:][:15] // busy, deleted and settles: each a length (1) and a value
	return bytes.Equal(flags, []byte("\x00\x00\x00\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00\x01\x00")) && bytes.Contains(b, []byte("SELECT 1\x00"))
}

// dropReplies makes every connection drop the reply of its next completion of one job
// (completionReply; empty claims say "UPDATE 0") and every
// byte after it, as if the network died right after the server committed.
func (p *tcpProxy) dropReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.swallow = true
}

// proxiedEngineWorker returns a worker (not started, no handler) whose engine pool reaches
// PostgreSQL through a tcpProxy.
func proxiedEngineWorker(t *testing.T, pool *pgxpool.Pool, rec *recorder) (*worker.Worker, *tcpProxy) {
	t.Helper()
	pc := pool.Config().ConnConfig
	proxy := newTCPProxy(t, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
	ecfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	require.NoError(t, err)
	ecfg.ConnConfig.Host, ecfg.ConnConfig.Port = "127.0.0.1", proxy.port()
	ecfg.ConnConfig.Fallbacks, ecfg.ConnConfig.TLSConfig = nil, nil
	ecfg.ConnConfig.ConnectTimeout = 2 * time.Second
	ecfg.MaxConns, ecfg.MinConns = 5, 0
	eng, err := pgxpool.NewWithConfig(context.Background(), ecfg)
	require.NoError(t, err)
	t.Cleanup(eng.Close)
	cfg := fastConfig(nil)
	cfg.EnginePool = eng
	cfg.OnOutcome = rec.outcome
	cfg.FinishRetryMax = 200 * time.Millisecond
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(proxy.restore)
	return w, proxy
}

// proxiedWorker starts a worker whose engine pool reaches PostgreSQL through a tcpProxy.
// The handler of chaosArgs sends its job on started and returns nil once release is closed.
func proxiedWorker(t *testing.T, pool *pgxpool.Pool, rec *recorder) (*worker.Worker, *tcpProxy, chan *generics.JobRow, chan struct{}) {
	t.Helper()
	w, proxy := proxiedEngineWorker(t, pool, rec)
	started := make(chan *generics.JobRow, 1)
	release := make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[chaosArgs]) error {
		rec.attempt(job.JobRow)
		started <- job.JobRow
		<-release
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	startWorker(t, w)
	t.Cleanup(func() {
		proxy.restore()
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return w, proxy, started, release
}

// TestChaosFinishWhileDatabaseUnreachable: the engine's connections are cut after the handler
// started and restored about a second later. The completion fails, is retried with the same
// claim token, and lands once the database is back: the job succeeds once, as generation 1.
func TestChaosFinishWhileDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := chaosPool(t)
	rec := &recorder{}
	w, proxy, started, release := proxiedWorker(t, pool, rec)
	c := newClient(t, pool, nil)
	row, err := c.Insert(ctx, chaosArgs{Tag: "unreachable"}, &jobs.InsertOpts{Lease: 20 * time.Second})
	require.NoError(t, err)
	meta := <-started

	proxy.cut()
	cutAt := time.Now()
	close(release)
	waitFor(t, 10*time.Second, "finish retries while the database is unreachable", func() bool {
		return w.Stats().FinishRetries >= 2 && time.Since(cutAt) >= time.Second
	})
	require.Equal(t, generics.JobStateRunning, getJob(t, c, row.Job.ID).State, "nothing landed while cut")
	proxy.restore()

	waitFor(t, 15*time.Second, "the retried finish to land", func() bool { _, o := rec.snapshot(); return len(o) == 1 })
	_, outcomes := rec.snapshot()
	require.NoError(t, outcomes[0].Err)
	require.Equal(t, "succeeded", outcomes[0].Transition)
	got := getJob(t, c, row.Job.ID)
	require.Equal(t, generics.JobStateSucceeded, got.State)
	require.EqualValues(t, 1, got.Generation)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, meta.ClaimToken, got.ClaimToken, "the same token's write landed")
	st := w.Stats()
	require.Positive(t, st.FinishRetries)
	require.EqualValues(t, 1, st.Succeeded)
	require.Zero(t, st.StaleRejected)
	require.Zero(t, st.FinishAbandoned)
	t.Logf("finish retries: %d, claim errors meanwhile: %d, heartbeat errors: %d", st.FinishRetries, st.ClaimErrors, st.HeartbeatErrors)
}

// TestChaosFinishReplyLost: the completion reaches the database and commits, but the reply is
// lost (the connection dies before the worker reads it). The engine retries the same fenced
// write, which now changes 0 rows because the job is already succeeded — under this very
// claim token. That is this attempt's own success, not a stale write: the outcome must be a
// success and nothing may be counted as stale_completion_rejected.
func TestChaosFinishReplyLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := chaosPool(t)
	rec := &recorder{}
	w, proxy, started, release := proxiedWorker(t, pool, rec)
	c := newClient(t, pool, nil)
	row, err := c.Insert(ctx, chaosArgs{Tag: "reply-lost"}, &jobs.InsertOpts{Lease: 20 * time.Second})
	require.NoError(t, err)
	meta := <-started

	proxy.dropReplies()
	close(release)
	waitFor(t, 10*time.Second, "the completion to commit", func() bool { return countState(t, pool, "succeeded") == 1 })
	proxy.cut() // the worker now sees its connection fail, without ever having read the reply
	waitFor(t, 10*time.Second, "a finish retry", func() bool { return w.Stats().FinishRetries >= 1 })
	proxy.restore()

	waitFor(t, 15*time.Second, "the finish to settle", func() bool { _, o := rec.snapshot(); return len(o) == 1 })
	got := getJob(t, c, row.Job.ID)
	require.Equal(t, generics.JobStateSucceeded, got.State)
	require.Equal(t, meta.ClaimToken, got.ClaimToken, "the job was completed under this attempt's own token")
	_, outcomes := rec.snapshot()
	st := w.Stats()
	t.Logf("outcome err: %v; stats: succeeded=%d stale_rejected=%d finish_retries=%d", outcomes[0].Err, st.Succeeded, st.StaleRejected, st.FinishRetries)
	require.NoError(t, outcomes[0].Err, "the worker's own committed completion is reported as a stale write")
	require.EqualValues(t, 1, st.Succeeded)
	require.Zero(t, st.StaleRejected)
}
