package worker_test

// Effects exactly once (docs/contract.md §7, §10 scenario 6): stable idempotency keys across
// generations, the effect ledger surviving crashes between the effect and the completion,
// fencing of stale generations in the ledger, transactional completion, and a soak of 2,000
// jobs under worker kills and induced lease expiries. The remote side is an in-test HTTP
// server that deduplicates by Idempotency-Key and counts calls and applications per key.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// effAttempt is what a test-side effect handler saw.
type effAttempt struct {
	Attempt    int
	Generation int64
	Replayed   bool
	Value      string
	ResultGen  int64
	Err        error
}

// effRec records a test-side effect worker's attempts, effect calls and outcomes.
type effRec struct {
	recorder
	fnRuns atomic.Int64
	mu     sync.Mutex
	keys   []string
	gens   []int64
	effs   []effAttempt
}

func (r *effRec) effects() []effAttempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]effAttempt(nil), r.effs...)
}

// effectWorker starts a test-side worker whose effArgs handler runs the "charge" effect
// against the dedup server and then returns after(job), or nil when after is nil.
func effectWorker(t *testing.T, pool *pgxpool.Pool, remote string, rec *effRec, after func(job *generics.Job[effArgs]) error) *worker.Worker {
	t.Helper()
	cfg := fastConfig(nil)
	cfg.OnOutcome = rec.outcome
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[effArgs]) error {
		rec.attempt(job.JobRow)
		res, err := worker.Effect(ctx, job.JobRow, "charge", func(ctx context.Context, call worker.EffectCall) (string, error) {
			rec.fnRuns.Add(1)
			rec.mu.Lock()
			rec.keys = append(rec.keys, call.Key)
			rec.gens = append(rec.gens, call.Generation)
			rec.mu.Unlock()
			return testkit.CallRemote(ctx, remote, call.Key, call.Generation)
		})
		rec.mu.Lock()
		rec.effs = append(rec.effs, effAttempt{job.Attempt, job.Generation, res.Replayed, res.Value, res.Generation, err})
		rec.mu.Unlock()
		if err != nil {
			return err
		}
		if after != nil {
			return after(job)
		}
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry, MaxAttempts: 5})
	startWorker(t, w)
	return w
}

type ledgerRow struct {
	Generation int64
	Result     string
}

// ledger returns the effect ledger's row for key (ok false when there is none).
func ledger(t testing.TB, pool *pgxpool.Pool, key string) (ledgerRow, bool) {
	t.Helper()
	var r ledgerRow
	var raw []byte
	err := pool.QueryRow(context.Background(), "SELECT generation, result FROM tenure.effects WHERE key = $1", key).Scan(&r.Generation, &raw)
	if err != nil {
		require.ErrorContains(t, err, "no rows")
		return r, false
	}
	require.NoError(t, json.Unmarshal(raw, &r.Result))
	return r, true
}

// TestEffectStableKeyAcrossGenerations: attempt 1 runs the effect and then fails; attempt 2
// (generation 2) asks for the same effect. The key is job:{id}:effect:{name} for both.
// "ledger-replay": attempt 1 recorded the effect, so attempt 2 replays it from the ledger
// without calling the remote. "remote-dedup": attempt 1's effect function failed after the
// remote applied it (nothing recorded), so attempt 2 calls again with the same key and the
// remote deduplicates. Either way the remote applies the effect once.
func TestEffectStableKeyAcrossGenerations(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"ledger-replay", "remote-dedup"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _ := chaosPool(t)
			remote := testkit.NewRemote(t)
			cfg := fastConfig(nil)
			w, err := worker.New(pool, cfg)
			require.NoError(t, err)
			var fnRuns atomic.Int64
			var mu sync.Mutex
			var keys []string
			var gens []int64
			var effs []effAttempt
			worker.MustRegister(w, func(ctx context.Context, job *generics.Job[effArgs]) error {
				res, err := worker.Effect(ctx, job.JobRow, "charge", func(ctx context.Context, call worker.EffectCall) (string, error) {
					fnRuns.Add(1)
					mu.Lock()
					keys, gens = append(keys, call.Key), append(gens, call.Generation)
					mu.Unlock()
					r, err := testkit.CallRemote(ctx, remote.URL, call.Key, call.Generation)
					if err == nil && mode == "remote-dedup" && job.Attempt == 1 {
						return "", errors.New("reply lost after the remote applied the effect")
					}
					return r, err
				})
				mu.Lock()
				effs = append(effs, effAttempt{job.Attempt, job.Generation, res.Replayed, res.Value, res.Generation, err})
				mu.Unlock()
				if err != nil {
					return err
				}
				if job.Attempt == 1 {
					return errors.New("attempt 1 fails after its effect")
				}
				return nil
			}, &worker.HandlerOptions{Retry: fastRetry, MaxAttempts: 3})
			c := newClient(t, pool, w)
			row, err := c.Insert(ctx, effArgs{Tag: mode}, nil)
			require.NoError(t, err)
			startWorker(t, w)
			waitFor(t, 15*time.Second, "the job to succeed", func() bool { return countState(t, pool, "succeeded") == 1 })
			require.NoError(t, stopWorker(t, w, 5*time.Second))

			key := fmt.Sprintf("job:%d:effect:charge", row.Job.ID)
			require.Equal(t, key, generics.EffectKey(row.Job.ID, "charge"))
			got := getJob(t, c, row.Job.ID)
			require.EqualValues(t, 2, got.Generation)
			require.Len(t, effs, 2)
			require.Equal(t, 1, effs[0].Attempt)
			require.Equal(t, 2, effs[1].Attempt)
			require.EqualValues(t, 2, effs[1].Generation)
			calls, applied, receipt := remote.Key(key)
			require.Equal(t, 1, applied, "the remote applied the effect once")
			nkeys, _, total := remote.Totals()
			require.Equal(t, 1, nkeys, "one key for every generation")
			require.Equal(t, 1, total)
			rowL, ok := ledger(t, pool, key)
			require.True(t, ok)
			switch mode {
			case "ledger-replay":
				require.EqualValues(t, 1, fnRuns.Load(), "the effect function ran once")
				require.Equal(t, 1, calls)
				require.NoError(t, effs[0].Err)
				require.False(t, effs[0].Replayed)
				require.True(t, effs[1].Replayed, "attempt 2 replays from the ledger")
				require.Equal(t, effs[0].Value, effs[1].Value)
				require.EqualValues(t, 1, effs[1].ResultGen, "the result was produced by generation 1")
				require.Equal(t, []string{key}, keys)
				require.Equal(t, ledgerRow{1, receipt}, rowL)
			case "remote-dedup":
				require.EqualValues(t, 2, fnRuns.Load())
				require.Equal(t, 2, calls, "the second generation called again")
				require.Error(t, effs[0].Err)
				require.False(t, effs[1].Replayed)
				require.Equal(t, receipt, effs[1].Value, "the remote answered the repeat with the first receipt")
				require.Equal(t, []string{key, key}, keys, "the same key across generations")
				require.Equal(t, []int64{1, 2}, gens, "the fencing generation grows")
				require.Equal(t, ledgerRow{2, receipt}, rowL)
			}
		})
	}
}

// TestEffectAfterLeaseLossReturnsLostOwnership: once the heartbeat found the lease lost (the
// handler's context cancelled with cause ErrLeaseLost), Effect must refuse with a
// *StaleWriteError (errors.Is ErrLostOwnership) — effect.go has that very branch — so the
// handler can tell "not mine any more" from a failure. The effect function must not run.
func TestEffectAfterLeaseLossReturnsLostOwnership(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := chaosPool(t)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	started := make(chan struct{}, 1)
	type seen struct {
		cause, err error
		ran        bool
	}
	done := make(chan seen, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[effArgs]) error {
		started <- struct{}{}
		<-ctx.Done()
		s := seen{cause: context.Cause(ctx)}
		_, s.err = worker.Effect(ctx, job.JobRow, "charge", func(context.Context, worker.EffectCall) (string, error) {
			s.ran = true
			return "x", nil
		})
		done <- s
		return s.cause
	}, &worker.HandlerOptions{Retry: fastRetry})
	c := newClient(t, pool, w)
	row, err := c.Insert(ctx, effArgs{Tag: "after-loss"}, &jobs.InsertOpts{Lease: 3 * time.Second})
	require.NoError(t, err)
	startWorker(t, w)
	<-started
	_, err = pool.Exec(ctx, "UPDATE tenure.jobs SET claim_token = gen_random_uuid() WHERE id = $1", row.Job.ID)
	require.NoError(t, err)
	var s seen
	select {
	case s = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the lease loss was not noticed")
	}
	require.Equal(t, worker.ErrLeaseLost, s.cause)
	require.False(t, s.ran, "no effect after the lease is lost")
	var stale *worker.StaleWriteError
	require.ErrorAs(t, s.err, &stale, "Effect after lease loss returned %v", s.err)
	require.ErrorIs(t, s.err, worker.ErrLostOwnership)
}

// TestEffectCrashBetweenEffectAndCompletion (scenario 6): a worker process applies the effect
// and is SIGKILLed before its completion. "recorded": it died after the ledger write; the
// retry (generation 2, another worker) finds the effect in the ledger and does not call the
// remote. "unrecorded": it died between the remote's reply and the ledger write; the retry
// calls the remote again with the same key and the remote deduplicates. The remote applied
// the effect exactly once; the job succeeds once.
func TestEffectCrashBetweenEffectAndCompletion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, handler, line string }{
		{"recorded", "effect-block", "effect-done"},
		{"unrecorded", "effect-remote-block", "remote-done"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, url := chaosPool(t)
			remote := testkit.NewRemote(t)
			c := newClient(t, pool, nil)
			row, err := c.Insert(ctx, effArgs{Tag: tc.name}, &jobs.InsertOpts{Lease: 2 * time.Second, MaxAttempts: 5})
			require.NoError(t, err)
			key := generics.EffectKey(row.Job.ID, "charge")

			a := startChild(t, childOpts{DB: url, Handler: tc.handler, Remote: remote.URL, ID: "worker-a"})
			rd := a.waitLine(t, 20*time.Second, "remote-done", forJob(row.Job.ID, 1))
			receiptA := rd[3]
			require.Equal(t, key, rd[4], "the child used the stable key")
			a.waitLine(t, 10*time.Second, tc.line, forJob(row.Job.ID, 1))
			a.killAndWait(t)

			_, recorded := ledger(t, pool, key)
			require.Equal(t, tc.name == "recorded", recorded)
			require.Equal(t, generics.JobStateRunning, getJob(t, c, row.Job.ID).State, "the completion never happened")

			rec := &effRec{}
			b := effectWorker(t, pool, remote.URL, rec, nil)
			waitFor(t, 20*time.Second, "the retry to succeed", func() bool { return countState(t, pool, "succeeded") == 1 })
			require.NoError(t, stopWorker(t, b, 5*time.Second))

			effs := rec.effects()
			require.Len(t, effs, 1)
			require.NoError(t, effs[0].Err)
			require.EqualValues(t, 2, effs[0].Generation)
			require.Equal(t, receiptA, effs[0].Value, "the retry got the first application's receipt")
			calls, applied, _ := remote.Key(key)
			require.Equal(t, 1, applied, "exactly one external effect")
			l, ok := ledger(t, pool, key)
			require.True(t, ok)
			require.Equal(t, receiptA, l.Result)
			if tc.name == "recorded" {
				require.True(t, effs[0].Replayed, "the retry found the effect in the ledger")
				require.Zero(t, rec.fnRuns.Load())
				require.Equal(t, 1, calls)
				require.EqualValues(t, 1, l.Generation)
			} else {
				require.False(t, effs[0].Replayed)
				require.EqualValues(t, 1, rec.fnRuns.Load())
				require.Equal(t, 2, calls, "the retry called the remote again with the same key")
				require.EqualValues(t, 2, l.Generation)
			}
			got := getJob(t, c, row.Job.ID)
			require.Equal(t, generics.JobStateSucceeded, got.State)
			require.EqualValues(t, 2, got.Generation)
			require.Len(t, got.Errors, 1)
			require.Equal(t, "LEASE_EXPIRED", got.Errors[0].Code)
			st := b.Stats()
			require.EqualValues(t, 1, st.Succeeded, "succeeded once")
			require.Zero(t, st.StaleRejected)
		})
	}
}

// TestEffectStaleGenerationRefused: worker A (a child) calls the remote and is SIGSTOPped
// past its lease before recording the effect; worker B (generation 2) re-runs the job, calls
// the remote with the same key (deduplicated: one application) and records the effect. When A
// resumes, its ledger write is refused (StaleWriteError), the ledger keeps B's generation-2
// record, and A's finish — the retry of a handler that returned the error, or the completion
// of one that ignored it — is rejected as stale.
func TestEffectStaleGenerationRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, flags, transition string }{
		{"handler-returns-error", "", "retried"},
		{"handler-ignores-error", "ignore-effect-err", "succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, url := chaosPool(t)
			remote := testkit.NewRemote(t)
			c := newClient(t, pool, nil)
			row, err := c.Insert(ctx, effArgs{Tag: tc.name}, &jobs.InsertOpts{Lease: 2 * time.Second, MaxAttempts: 5})
			require.NoError(t, err)
			key := generics.EffectKey(row.Job.ID, "charge")

			a := startChild(t, childOpts{DB: url, Handler: "effect-stale", Flags: tc.flags, Remote: remote.URL, ID: "worker-a"})
			rd := a.waitLine(t, 20*time.Second, "remote-done", forJob(row.Job.ID, 1))
			receiptA := rd[3]
			a.pause()

			rec := &effRec{}
			b := effectWorker(t, pool, remote.URL, rec, nil)
			waitFor(t, 20*time.Second, "B to complete generation 2", func() bool { return countState(t, pool, "succeeded") == 1 })
			effs := rec.effects()
			require.Len(t, effs, 1)
			require.NoError(t, effs[0].Err)
			require.False(t, effs[0].Replayed, "A never recorded, so B runs the effect")
			require.Equal(t, receiptA, effs[0].Value, "the remote deduplicated B's call")
			calls, applied, _ := remote.Key(key)
			require.Equal(t, 2, calls)
			require.Equal(t, 1, applied, "both workers reached the effect; the remote applied it once")
			l, ok := ledger(t, pool, key)
			require.True(t, ok)
			require.Equal(t, ledgerRow{2, receiptA}, l, "the ledger holds B's record")
			won := getJob(t, c, row.Job.ID)
			require.EqualValues(t, 2, won.Generation)

			a.send(t, "go")
			a.resume()
			ee := a.waitLine(t, 15*time.Second, "effect-err", forJob(row.Job.ID, 1))
			require.Equal(t, "true", kv(ee, "stale"), "A's ledger write is refused as stale: %v", ee)
			o := a.waitLine(t, 15*time.Second, "outcome", forJob(row.Job.ID, 1))
			require.Equal(t, tc.transition, o[3])
			require.Equal(t, "true", kv(o, "stale"), "A's %s is rejected: %v", tc.transition, o)
			a.send(t, "stats")
			s := a.waitLine(t, 10*time.Second, "stats", nil)
			require.EqualValues(t, 2, kvInt(s, "stale"), "the ledger write and the finish: %v", s)

			l2, _ := ledger(t, pool, key)
			require.Equal(t, l, l2, "a stale generation never overwrites the ledger")
			after := getJob(t, c, row.Job.ID)
			require.Equal(t, generics.JobStateSucceeded, after.State)
			require.Equal(t, *won.ClaimToken, *after.ClaimToken)
			require.Equal(t, won.UpdatedAt, after.UpdatedAt)
			_, _, total := remote.Totals()
			require.Equal(t, 1, total)
			require.NoError(t, stopWorker(t, b, 5*time.Second))
			require.EqualValues(t, 1, b.Stats().Succeeded)
			require.Zero(t, b.Stats().StaleRejected)
		})
	}
}

// TestEffectCompleteTx: the handler's business write and worker.CompleteTx share one
// transaction. "commit": the job succeeds with the business row, finished exactly once.
// "lease-lost": the claim token changes under the handler before CompleteTx; CompleteTx
// returns ErrLostOwnership, the handler rolls back and the business row is absent.
// "rollback-after-complete": CompleteTx succeeded but the handler rolled back and failed: the
// job is retried normally and only the second attempt's row exists.
// "lease-lost-in-flight": CompleteTx's statement waits on a row lock another session holds
// while the engine gives the lease up (its heartbeats cannot extend a locked row, so the
// lease runs out) and cancels the handler's context under the statement: CompleteTx still says ErrLostOwnership,
// not the context error, and the job is reclaimed and succeeds on its next attempt.
func TestEffectCompleteTx(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"commit", "lease-lost", "rollback-after-complete", "lease-lost-in-flight"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _ := chaosPool(t)
			_, err := pool.Exec(ctx, "CREATE TABLE app_orders (job_id bigint NOT NULL, attempt int NOT NULL, UNIQUE (job_id, attempt))")
			require.NoError(t, err)
			rec := &recorder{}
			cfg := fastConfig(nil)
			cfg.OnOutcome = rec.outcome
			w, err := worker.New(pool, cfg)
			require.NoError(t, err)
			inTx := make(chan struct{}, 1)
			proceed := make(chan struct{})
			completeErrs := make(chan error, 4)
			worker.MustRegister(w, func(ctx context.Context, job *generics.Job[chaosArgs]) error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer func() { _ = tx.Rollback(context.Background()) }()
				if _, err := tx.Exec(ctx, "INSERT INTO app_orders (job_id, attempt) VALUES ($1, $2)", job.ID, job.Attempt); err != nil {
					return err
				}
				if (mode == "lease-lost" || mode == "lease-lost-in-flight") && job.Attempt == 1 {
					inTx <- struct{}{}
					<-proceed
				}
				err = worker.CompleteTx(ctx, tx, job.JobRow)
				completeErrs <- err
				if err != nil {
					return err // deferred rollback
				}
				if mode == "rollback-after-complete" && job.Attempt == 1 {
					_ = tx.Rollback(ctx)
					return errors.New("business rule failed after CompleteTx")
				}
				return tx.Commit(ctx)
			}, &worker.HandlerOptions{Retry: fastRetry, MaxAttempts: 3})
			c := newClient(t, pool, w)
			lease := 20 * time.Second
			if mode == "lease-lost-in-flight" {
				lease = 3 * time.Second // the locked row's lease runs out 3 s after its last heartbeat
			}
			row, err := c.Insert(ctx, chaosArgs{Tag: mode}, &jobs.InsertOpts{Lease: lease})
			require.NoError(t, err)
			startWorker(t, w)
			businessRows := func() int {
				var n int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM app_orders WHERE job_id = $1", row.Job.ID).Scan(&n))
				return n
			}

			switch mode {
			case "commit":
				waitFor(t, 10*time.Second, "the outcome", func() bool { _, o := rec.snapshot(); return len(o) == 1 })
				require.NoError(t, <-completeErrs)
				got := getJob(t, c, row.Job.ID)
				require.Equal(t, generics.JobStateSucceeded, got.State)
				require.EqualValues(t, 1, got.Generation)
				require.Equal(t, 1, businessRows())
				require.NoError(t, stopWorker(t, w, 5*time.Second))
				_, outcomes := rec.snapshot()
				require.Len(t, outcomes, 1)
				require.NoError(t, outcomes[0].Err)
				st := w.Stats()
				require.EqualValues(t, 1, st.Succeeded, "no double finish")
				require.Zero(t, st.StaleRejected)
				require.Zero(t, st.FinishRetries)

			case "lease-lost":
				<-inTx
				_, err := pool.Exec(ctx, "UPDATE tenure.jobs SET claim_token = gen_random_uuid(), locked_by = 'usurper' WHERE id = $1", row.Job.ID)
				require.NoError(t, err)
				taken := getJob(t, c, row.Job.ID)
				close(proceed)
				cerr := <-completeErrs
				var stale *worker.StaleWriteError
				require.ErrorAs(t, cerr, &stale)
				require.ErrorIs(t, cerr, worker.ErrLostOwnership)
				waitFor(t, 10*time.Second, "the outcome", func() bool { _, o := rec.snapshot(); return len(o) == 1 })
				require.Zero(t, businessRows(), "the business write rolled back with the refused completion")
				after := getJob(t, c, row.Job.ID)
				require.Equal(t, generics.JobStateRunning, after.State)
				require.Equal(t, taken.ClaimToken, after.ClaimToken)
				require.Equal(t, taken.UpdatedAt, after.UpdatedAt)
				_, outcomes := rec.snapshot()
				require.ErrorIs(t, outcomes[0].Err, worker.ErrLostOwnership)
				st := w.Stats()
				require.Zero(t, st.Succeeded)
				require.GreaterOrEqual(t, st.StaleRejected, int64(1))

			case "lease-lost-in-flight":
				<-inTx
				locker, err := pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = locker.Rollback(ctx) }()
				_, err = locker.Exec(ctx, "SELECT 1 FROM tenure.jobs WHERE id = $1 FOR UPDATE", row.Job.ID)
				require.NoError(t, err)
				close(proceed)
				var cerr error
				select {
				case cerr = <-completeErrs:
				case <-time.After(30 * time.Second):
					t.Fatal("CompleteTx still waiting 30 s after the lock was taken: the lease was never given up")
				}
				var stale *worker.StaleWriteError
				require.ErrorAs(t, cerr, &stale, "a statement cancelled for a lost lease is a lost ownership")
				require.ErrorIs(t, cerr, worker.ErrLostOwnership)
				require.NoError(t, locker.Rollback(ctx))
				waitFor(t, 20*time.Second, "the reclaimed job to succeed", func() bool { return countState(t, pool, "succeeded") == 1 })
				require.NoError(t, <-completeErrs)
				got := getJob(t, c, row.Job.ID)
				require.EqualValues(t, 2, got.Generation)
				require.Equal(t, 1, businessRows(), "only the second attempt's business row")
				require.NoError(t, stopWorker(t, w, 5*time.Second))
				st := w.Stats()
				require.EqualValues(t, 1, st.Succeeded)
				require.GreaterOrEqual(t, st.StaleRejected, int64(1))

			case "rollback-after-complete":
				waitFor(t, 15*time.Second, "the retry to succeed", func() bool { return countState(t, pool, "succeeded") == 1 })
				waitFor(t, 10*time.Second, "both outcomes", func() bool { _, o := rec.snapshot(); return len(o) == 2 })
				got := getJob(t, c, row.Job.ID)
				require.EqualValues(t, 2, got.Generation)
				require.Len(t, got.Errors, 1)
				require.Equal(t, "HANDLER_ERROR", got.Errors[0].Code)
				require.Equal(t, 1, businessRows())
				var attempt int
				require.NoError(t, pool.QueryRow(ctx, "SELECT attempt FROM app_orders WHERE job_id = $1", row.Job.ID).Scan(&attempt))
				require.Equal(t, 2, attempt)
				require.NoError(t, stopWorker(t, w, 5*time.Second))
				st := w.Stats()
				require.EqualValues(t, 1, st.Retried)
				require.EqualValues(t, 1, st.Succeeded)
				require.Zero(t, st.StaleRejected)
			}
		})
	}
}

// TestEffectSoak: 2,000 jobs, each with one effect against the dedup server, run by three
// worker processes with 1–2 s leases while the test SIGKILLs children (and starts
// replacements) and SIGSTOPs them past their leases. In the end every job succeeded, every
// job's key was applied exactly once, and the remote saw exactly 2,000 applications.
func TestEffectSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	ctx := context.Background()
	pool, url := chaosPool(t)
	remote := testkit.NewRemote(t)
	c := newClient(t, pool, nil)
	const n = 2000
	params := make([]jobs.InsertManyParams, n)
	for i := range params {
		lease := time.Second
		if i%2 == 1 {
			lease = 2 * time.Second
		}
		params[i] = jobs.InsertManyParams{Args: effArgs{Tag: strconv.Itoa(i)}, Opts: &jobs.InsertOpts{Lease: lease, MaxAttempts: 100}}
	}
	ids, err := c.InsertMany(ctx, params)
	require.NoError(t, err)

	const children = 3
	var (
		seq        int
		procs      [children]*childProc
		kills      int
		pauses     int
		deadStats  []worker.Stats // last stats printed by killed children
		finalStats []worker.Stats
	)
	spawn := func(i int) {
		seq++
		procs[i] = startChild(t, childOpts{DB: url, Handler: "soak", Remote: remote.URL, Concurrency: 8,
			ID: fmt.Sprintf("soak-%d", seq), StatsEvery: 200 * time.Millisecond, SleepMS: 150})
		procs[i].waitLine(t, 20*time.Second, "ready", nil) // its SIGTERM handler is installed
	}
	for i := range procs {
		spawn(i)
	}
	remaining := func() int {
		var left int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE state <> 'succeeded'").Scan(&left))
		return left
	}

	start := time.Now()
	chaosFor, deadline := 30*time.Second, 100*time.Second
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	left := n
	for action := 0; ; action++ {
		left = remaining()
		if left == 0 {
			break
		}
		if time.Since(start) > deadline {
			t.Fatalf("%d of %d jobs still not succeeded after %v", left, n, deadline)
		}
		for _, p := range procs {
			if !p.alive() {
				t.Fatalf("child %s died on its own: %v", p.name, p.waitErr)
			}
		}
		if time.Since(start) > chaosFor {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		i := rng.IntN(children)
		if action%2 == 0 {
			// Crash: SIGKILL, then a replacement process.
			if s := procs[i].last("stats"); s != nil {
				deadStats = append(deadStats, parseStats(s))
			}
			procs[i].killAndWait(t)
			kills++
			spawn(i)
		} else {
			// Stall past the lease (at most 2 s, renewed by the last heartbeat).
			procs[i].pause()
			pauses++
			time.Sleep(time.Duration(2300+rng.IntN(800)) * time.Millisecond)
			procs[i].resume()
		}
	}
	elapsed := time.Since(start)

	// Graceful stop of the survivors, collecting their counters.
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		f := p.waitLine(t, 20*time.Second, "final-stats", nil)
		finalStats = append(finalStats, parseStats(f))
	}

	// Every job succeeded; every key was applied exactly once; nothing else was applied.
	require.Equal(t, n, countState(t, pool, "succeeded"))
	missing, dup := 0, 0
	for _, id := range ids {
		_, applied, _ := remote.Key(generics.EffectKey(id.Job.ID, "charge"))
		switch {
		case applied == 0:
			missing++
		case applied > 1:
			dup++
		}
	}
	require.Zero(t, missing, "jobs whose effect never reached the remote")
	require.Zero(t, dup, "jobs whose effect was applied more than once")
	keys, calls, applied := remote.Totals()
	require.Equal(t, n, keys, "one stable key per job")
	require.Equal(t, n, applied, "the sum of applications")

	// The ledger holds one record per job, matching the remote's receipt, never from a
	// generation later than the job's final one.
	var ledgerRows, mismatched, future int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE e.generation > j.generation)
		FROM tenure.effects e JOIN tenure.jobs j ON j.id = e.job_id`).Scan(&ledgerRows, &future))
	require.Equal(t, n, ledgerRows)
	require.Zero(t, future)
	rows, err := pool.Query(ctx, "SELECT key, result FROM tenure.effects")
	require.NoError(t, err)
	for rows.Next() {
		var key string
		var raw []byte
		require.NoError(t, rows.Scan(&key, &raw))
		var v string
		require.NoError(t, json.Unmarshal(raw, &v))
		if _, _, rc := remote.Key(key); rc != v {
			mismatched++
		}
	}
	require.NoError(t, rows.Err())
	require.Zero(t, mismatched, "ledger results that differ from the remote's receipt")

	var reclaims, retried, maxGen int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM tenure.jobs j, jsonb_array_elements(j.errors) e WHERE e->>'code' = 'LEASE_EXPIRED'),
		(SELECT count(*) FROM tenure.jobs WHERE generation > 1),
		(SELECT max(generation) FROM tenure.jobs)`).Scan(&reclaims, &retried, &maxGen))
	var stale, leasesLost, childReclaimed int64
	for _, s := range append(deadStats, finalStats...) {
		stale += s.StaleRejected
		leasesLost += s.LeasesLost
		childReclaimed += s.Reclaimed
	}
	staleGenCalls := remote.StaleGenerations()
	t.Logf("soak: %d jobs in %v; kills=%d pauses=%d; reclaims=%d (LEASE_EXPIRED in history; sweeps reported %d); "+
		"jobs run more than once=%d, max generation=%d; stale rejections>=%d; leases lost>=%d; "+
		"remote calls=%d for %d applications (%d deduplicated, %d from a stale generation)",
		n, elapsed.Round(time.Millisecond), kills, pauses, reclaims, childReclaimed, retried, maxGen, stale, leasesLost,
		calls, applied, calls-applied, staleGenCalls)
	require.Positive(t, kills)
	require.Positive(t, pauses)
	require.Positive(t, reclaims, "the chaos caused lease expiries")
}

// parseStats reads a child's "stats"/"final-stats" line.
func parseStats(f []string) worker.Stats {
	return worker.Stats{
		Claimed: kvInt(f, "claimed"), Succeeded: kvInt(f, "succeeded"), Retried: kvInt(f, "retried"),
		StaleRejected: kvInt(f, "stale"), LeasesLost: kvInt(f, "leases_lost"), Reclaimed: kvInt(f, "reclaimed"),
	}
}
