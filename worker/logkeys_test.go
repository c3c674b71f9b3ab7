package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/logkey"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/worker"
)

// TestJobLogRecordsCarryTheJobKeys runs jobs through success, retry, dead, panic, a lost
// lease and a stale finish with a JSON handler, and checks the records: every one carries the
// worker's id under "worker"; every one about a job carries job_id, kind, queue, attempt and
// generation under exactly these names and with the job's values; no record uses a key
// outside logkey.Known (another spelling of the same thing); and the levels match the
// severity: a retried attempt WARN, a dead job ERROR, a panic ERROR, a lost lease and a
// stale finish WARN (and a finish that was rejected is not reported as its outcome).
func TestJobLogRecordsCarryTheJobKeys(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	buf := &syncBuffer{}
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4}})
	cfg.ID = "log-keys"
	cfg.Logger = slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	fast := worker.FullJitter{Base: time.Millisecond, Cap: time.Millisecond}
	worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
	worker.MustRegister(w, func(_ context.Context, j *generics.Job[failArgs]) error {
		if j.Args.Msg == "panic" {
			panic("boom")
		}
		return errors.New(j.Args.Msg)
	}, &worker.HandlerOptions{MaxAttempts: 2, Retry: fast})
	running := make(chan int64, 4)
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[slowArgs]) error {
		running <- j.ID
		<-ctx.Done() // until the lease is lost
		return ctx.Err()
	}, &worker.HandlerOptions{Lease: time.Second, MaxAttempts: 1, Retry: fast})
	c := newClient(t, pool, w)
	ok, err := c.Insert(ctx, noopArgs{N: 1}, nil)
	require.NoError(t, err)
	fail, err := c.Insert(ctx, failArgs{Msg: "no luck"}, nil)
	require.NoError(t, err)
	panics, err := c.Insert(ctx, failArgs{Msg: "panic"}, nil)
	require.NoError(t, err)
	slow, err := c.Insert(ctx, slowArgs{}, nil)
	require.NoError(t, err)
	startWorker(t, w)

	// The slow job's claim token changes while its handler runs (as when its lease expired
	// and another worker took it): the next heartbeat is refused, the handler's context is
	// cancelled, and its finish is rejected as stale.
	select {
	case <-running:
	case <-time.After(20 * time.Second):
		t.Fatal("the slow job was not claimed")
	}
	tag, err := pool.Exec(ctx, `UPDATE tenure.jobs SET claim_token = gen_random_uuid() WHERE id = $1 AND state = 'running'`, slow.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	waitFor(t, 20*time.Second, "the jobs to finish", func() bool {
		st := w.Stats()
		return st.Succeeded >= 1 && st.Dead >= 2 && st.StaleRejected >= 1
	})
	require.NoError(t, stopWorker(t, w, 10*time.Second))

	ids := map[int64]string{ok.ID: "noop", fail.ID: "fail", panics.ID: "fail", slow.ID: "slow"}
	type seen struct{ level, msg string }
	byJob := map[int64][]seen{}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.NotEmpty(t, lines)
	for _, line := range lines {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		require.Equal(t, "log-keys", r[logkey.Worker], "every record names the worker: %s", line)
		for k := range r {
			if k == slog.TimeKey || k == slog.LevelKey || k == slog.MessageKey {
				continue
			}
			require.True(t, logkey.Known[k], "unknown log key %q (see internal/logkey): %s", k, line)
		}
		_, hasID := r[logkey.JobID]
		_, hasGen := r[logkey.Generation]
		if !hasID && !hasGen {
			continue
		}
		for _, k := range []string{logkey.JobID, logkey.Kind, logkey.Queue, logkey.Attempt, logkey.Generation} {
			require.Contains(t, r, k, "a record about a job lacks %q: %s", k, line)
		}
		id := int64(r[logkey.JobID].(float64))
		kind, known := ids[id]
		require.True(t, known, "job_id %d is not one of this test's jobs: %s", id, line)
		require.Equal(t, kind, r[logkey.Kind], line)
		require.Equal(t, "default", r[logkey.Queue], line)
		require.GreaterOrEqual(t, r[logkey.Attempt].(float64), 1.0, line)
		require.GreaterOrEqual(t, r[logkey.Generation].(float64), 1.0, line)
		byJob[id] = append(byJob[id], seen{r[slog.LevelKey].(string), r[slog.MessageKey].(string)})
	}
	has := func(id int64, level, msgPart string) {
		t.Helper()
		for _, s := range byJob[id] {
			if s.level == level && strings.Contains(s.msg, msgPart) {
				return
			}
		}
		t.Errorf("job %d (%s): no %s record containing %q among %v", id, ids[id], level, msgPart, byJob[id])
	}
	has(fail.ID, "WARN", "retrying")
	has(fail.ID, "ERROR", "job is dead")
	has(panics.ID, "ERROR", "handler panicked")
	has(panics.ID, "ERROR", "job is dead")
	has(slow.ID, "WARN", "lease lost")
	has(slow.ID, "WARN", "stale finish rejected")
	for _, s := range byJob[slow.ID] { // its dead finish was rejected: it is not reported as dead
		require.NotContains(t, s.msg, "job is dead")
	}
}
