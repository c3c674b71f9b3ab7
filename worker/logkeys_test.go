package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	tag, err := pool.Exec(ctx, `UPDATE tenure.jobs SET claim_token = gen_random_uuid() WHERE id = $1 AND state = 'running'`, slow.Job.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	waitFor(t, 20*time.Second, "the jobs to finish", func() bool {
		st := w.Stats()
		return st.Succeeded >= 1 && st.Dead >= 2 && st.StaleRejected >= 1
	})
	require.NoError(t, stopWorker(t, w, 10*time.Second))

	ids := map[int64]string{ok.Job.ID: "noop", fail.Job.ID: "fail", panics.Job.ID: "fail", slow.Job.ID: "slow"}
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
	has(fail.Job.ID, "WARN", "retrying")
	has(fail.Job.ID, "ERROR", "job is dead")
	has(panics.Job.ID, "ERROR", "handler panicked")
	has(panics.Job.ID, "ERROR", "job is dead")
	has(slow.Job.ID, "WARN", "lease lost")
	has(slow.Job.ID, "WARN", "stale finish rejected")
	for _, s := range byJob[slow.Job.ID] { // its dead finish was rejected: it is not reported as dead
		require.NotContains(t, s.msg, "job is dead")
	}
}

// cutProxy forwards TCP connections to a PostgreSQL server until Cut, which closes every
// connection and refuses new ones: the database becomes unreachable, as in a network outage.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close(); p.Cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestFailingDatabaseDoesNotFloodTheLog: with the database unreachable (every connection
// cut, new ones refused) while jobs run, the claim loop, heartbeats, sweeps, registry
// heartbeats, finish-write retries and the listener fail hundreds of times in a few seconds;
// the log gets at most one line per source per 10 s (plus one per job abandoned), and Stats
// still count every failure.
func TestFailingDatabaseDoesNotFloodTheLog(t *testing.T) {
	t.Parallel()
	admin, err := pgx.ParseConfig(pgtest.AdminURL(t))
	require.NoError(t, err)
	proxy := startCutProxy(t, net.JoinHostPort(admin.Host, strconv.Itoa(int(admin.Port))))
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) {
		host, port, err := net.SplitHostPort(proxy.ln.Addr().String())
		require.NoError(t, err)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		c.ConnConfig.Host, c.ConnConfig.Port = host, uint16(p)
		c.ConnConfig.Fallbacks, c.ConnConfig.TLSConfig = nil, nil
		c.ConnConfig.ConnectTimeout = time.Second
	})
	ctx := context.Background()
	buf := &syncBuffer{}
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2}})
	cfg.Logger = slog.New(slog.NewJSONHandler(buf, nil))
	cfg.FetchPollMax = 20 * time.Millisecond
	cfg.ReclaimEvery = 20 * time.Millisecond
	cfg.RegistryEvery = 10 * time.Millisecond
	cfg.FinishRetryMax = 20 * time.Millisecond
	cfg.FinishLinger = -1 // each finish written at once: no linger timer on the fake clock below
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	// The throttle's interval (engine.ErrorLogEvery) never passes on the engine's clock, however long a
	// loaded machine takes: every source may log once.
	worker.UseFakeClock(w, time.Now())
	running := make(chan struct{}, 2)
	release := make(chan struct{})
	worker.MustRegister(w, func(context.Context, *generics.Job[slowArgs]) error {
		running <- struct{}{}
		<-release
		return nil
	}, &worker.HandlerOptions{Lease: 3 * time.Second})
	c := newClient(t, pool, w)
	for range 2 {
		_, err := c.Insert(ctx, slowArgs{}, nil)
		require.NoError(t, err)
	}
	startWorker(t, w)
	for range 2 {
		select {
		case <-running:
		case <-time.After(20 * time.Second):
			t.Fatal("jobs not claimed")
		}
	}
	proxy.Cut()
	cutAt := time.Now()
	close(release) // their finishes now fail and are retried until the lease runs out
	var st worker.Stats
	var failures int64
	// The window is the scenario: past the jobs' 3 s lease (what follows its end is logged too),
	// and as long as a loaded machine needs for many failures of every source.
	waitFor(t, 60*time.Second, "many failures of every source, past the lease's end", func() bool {
		st = w.Stats()
		failures = st.ClaimErrors + st.HeartbeatErrors + st.ReclaimErrors + st.RegistryErrors + st.FinishRetries
		return failures > 100 && st.ClaimErrors > 0 && st.RegistryErrors > 0 && st.FinishRetries > 0 && st.FinishAbandoned == 2 &&
			time.Since(cutAt) > 4*time.Second
	})
	logged := buf.String()

	perMsg := map[string]int{}
	lines := strings.Split(strings.TrimSpace(logged), "\n")
	for _, line := range lines {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		msg := r[slog.MessageKey].(string)
		if _, aboutJob := r[logkey.JobID]; aboutJob {
			msg += " (job)"
		}
		perMsg[msg]++
	}
	for msg, n := range perMsg {
		limit := 1 // one line per source: the engine's clock stays within engine.ErrorLogEvery
		if strings.HasSuffix(msg, " (job)") {
			limit = 2 // one per job
		}
		require.LessOrEqual(t, n, limit, "%q logged %d times (%d failures):\n%s", msg, n, failures, logged)
	}
	require.Less(t, len(lines), 20, "log lines for %d failures:\n%s", failures, logged)
}
