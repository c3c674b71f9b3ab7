package faults_test

// Shared harness of the fault scenarios: args kinds, worker config, waiting, the final audit
// of every job (lost / wrong final state / stuck running) and the RESULT line, private
// clusters, the deduplicating remote, and pickup-latency probes.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// faultArgs is the plain kind of the scenarios; effArgs performs one external effect.
type faultArgs struct {
	N int `json:"n"`
}

func (faultArgs) Kind() string        { return "fault" }
func (faultArgs) PayloadVersion() int { return 1 }

type effArgs struct {
	N int `json:"n"`
}

func (effArgs) Kind() string        { return "effect" }
func (effArgs) PayloadVersion() int { return 1 }

// fastRetry brings retries and reclaims back within milliseconds.
var fastRetry = worker.FullJitter{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("fault-injection scenario (slow): run with make chaos")
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("TENURE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastConfig is a worker config with short polling and sweeps.
func fastConfig(queues map[string]worker.QueueConfig) *worker.Config {
	return &worker.Config{
		Queues:       queues,
		Logger:       testLogger(),
		FetchPollMin: 10 * time.Millisecond,
		FetchPollMax: 100 * time.Millisecond,
		ReclaimEvery: 100 * time.Millisecond,
		StuckGrace:   200 * time.Millisecond,
	}
}

func newClient(t testing.TB, pool *pgxpool.Pool) *jobs.Client {
	t.Helper()
	c, err := jobs.NewClient(pool, &jobs.Config{})
	require.NoError(t, err)
	return c
}

func startWorker(t testing.TB, w *worker.Worker) {
	t.Helper()
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

// waitFor polls cond until it is true or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tryFor is waitFor that reports instead of failing.
func tryFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// countStates returns the number of jobs per state (errors count as -1 in "error").
func countStates(ctx context.Context, pool *pgxpool.Pool) map[string]int {
	out := map[string]int{}
	rows, err := pool.Query(ctx, "SELECT state::text, count(*) FROM tenure.jobs GROUP BY 1")
	if err != nil {
		out["error"] = -1
		return out
	}
	var s string
	var n int
	_, _ = pgx.ForEachRow(rows, []any{&s, &n}, func() error { out[s] = n; return nil })
	return out
}

func countState(t testing.TB, pool *pgxpool.Pool, state string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.jobs WHERE state = $1", state).Scan(&n))
	return n
}

// insertN enqueues n jobs of args(i) with opts in batches and returns their ids.
func insertN(t testing.TB, c *jobs.Client, n int, args func(i int) any, opts *jobs.InsertOpts) []int64 {
	t.Helper()
	var ids []int64
	for lo := 0; lo < n; lo += 500 {
		var ps []jobs.InsertManyParams
		for i := lo; i < min(n, lo+500); i++ {
			switch a := args(i).(type) {
			case faultArgs:
				ps = append(ps, jobs.InsertManyParams{Args: a, Opts: opts})
			case effArgs:
				ps = append(ps, jobs.InsertManyParams{Args: a, Opts: opts})
			default:
				t.Fatalf("insertN: %T", a)
			}
		}
		got, err := c.InsertMany(context.Background(), ps)
		require.NoError(t, err)
		for _, r := range got {
			ids = append(ids, r.Job.ID)
		}
	}
	return ids
}

// tally is the final audit of a scenario's jobs.
type tally struct {
	Jobs, Lost, Wrong, Stuck int
	Wrongs                   []string
}

// audit checks every job in ids: lost (row gone), wrong (not in state want), stuck (running
// with its lease expired more than grace ago on the database clock).
func audit(t testing.TB, pool *pgxpool.Pool, ids []int64, want generics.JobState, grace time.Duration) tally {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT id, state::text, coalesce(locked_until < clock_timestamp() - $2::interval, false)
		FROM tenure.jobs WHERE id = ANY($1)`, ids, grace)
	require.NoError(t, err)
	seen := map[int64]bool{}
	tl := tally{Jobs: len(ids)}
	var id int64
	var st string
	var stuck bool
	_, err = pgx.ForEachRow(rows, []any{&id, &st, &stuck}, func() error {
		seen[id] = true
		if st != string(want) {
			tl.Wrong++
			if len(tl.Wrongs) < 10 {
				tl.Wrongs = append(tl.Wrongs, fmt.Sprintf("%d:%s", id, st))
			}
		}
		if st == "running" && stuck {
			tl.Stuck++
		}
		return nil
	})
	require.NoError(t, err)
	tl.Lost = len(ids) - len(seen)
	return tl
}

// result logs the scenario's RESULT line (for docs/reliability.md) and then asserts the
// audit: nothing lost, nothing in a wrong final state, nothing stuck running.
func result(t *testing.T, scenario string, tl tally, recovery string, extra ...string) {
	t.Helper()
	line := fmt.Sprintf("RESULT scenario=%s jobs=%d lost=%d wrong=%d stuck=%d recovery=%s", scenario, tl.Jobs, tl.Lost, tl.Wrong, tl.Stuck, recovery)
	if len(extra) > 0 {
		line += " " + strings.Join(extra, " ")
	}
	t.Log(line)
	require.Zero(t, tl.Lost, "jobs lost")
	require.Zero(t, tl.Wrong, "jobs in a wrong final state: %v", tl.Wrongs)
	require.Zero(t, tl.Stuck, "jobs stuck running past lease + grace")
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }

// ---------------------------------------------------------------------------------------------
// Private clusters
// ---------------------------------------------------------------------------------------------

// privateCluster starts a throwaway cluster this test may crash and restart. Commits are
// synchronous by default there (fsync stays off: only the server processes crash, never the
// machine), so a crash loses exactly what a production server with default settings would.
func privateCluster(t *testing.T, settings ...string) *pgserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := pgserver.StartWith(ctx, t.Logf, pgserver.Options{Settings: append([]string{"synchronous_commit=on"}, settings...)})
	if err == pgserver.ErrNoBinaries {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// migratedDB creates database name on srv with every migration applied and returns its URL.
func migratedDB(t *testing.T, srv *pgserver.Server, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, srv.URL)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	u := pgserver.DatabaseURL(srv.URL, name)
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = migrations.UpConn(ctx, conn)
	require.NoError(t, err)
	return u
}

func openPool(t testing.TB, url string, maxConns int32, appName string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	if appName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// withAppName returns url with application_name set (a URL query parameter).
func withAppName(url, name string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "application_name=" + name
}

// ---------------------------------------------------------------------------------------------
// The remote side of effects: deduplicates by Idempotency-Key, counts applications per key.
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Pickup latency: insert -> handler start, for NOTIFY wake-up checks.
// ---------------------------------------------------------------------------------------------

// pickupProbe runs a worker whose "fault" handler records when each job started; probe
// inserts one job and returns its pickup latency (insert return -> handler start).
type pickupProbe struct {
	mu      sync.Mutex
	started map[int]time.Time
	c       *jobs.Client
	seq     int
}

func newPickupProbe(c *jobs.Client) *pickupProbe {
	return &pickupProbe{started: map[int]time.Time{}, c: c}
}

func (p *pickupProbe) handlerStarted(n int) {
	p.mu.Lock()
	p.started[n] = time.Now()
	p.mu.Unlock()
}

// one inserts a job and waits up to timeout for it to start; it returns the latency, the
// job id, and false when it did not start in time (or the insert failed).
func (p *pickupProbe) one(timeout time.Duration) (time.Duration, int64, bool) {
	p.mu.Lock()
	p.seq++
	n := p.seq
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	row, err := p.c.Insert(ctx, faultArgs{N: n}, &jobs.InsertOpts{Lease: 5 * time.Second})
	if err != nil {
		return 0, 0, false
	}
	t0 := time.Now()
	var at time.Time
	ok := tryFor(timeout, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		at = p.started[n]
		return !at.IsZero()
	})
	if !ok {
		return timeout, row.Job.ID, false
	}
	return max(at.Sub(t0), 0), row.Job.ID, true
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// baseline measures n pickups spaced by gap (the queue idle between them).
func (p *pickupProbe) baseline(t testing.TB, n int, gap time.Duration) ([]time.Duration, []int64) {
	t.Helper()
	var lat []time.Duration
	var ids []int64
	for i := 0; i < n; i++ {
		time.Sleep(gap)
		d, id, ok := p.one(10 * time.Second)
		require.True(t, ok, "baseline job %d not picked up", i)
		lat = append(lat, d)
		ids = append(ids, id)
	}
	return lat, ids
}

// recovered probes pickups every gap after a fault until `run` consecutive pickups are within
// bound, or until deadline. It returns when the first of those started (since `since`), all
// probe ids, the latencies, and whether it recovered.
func (p *pickupProbe) recovered(since time.Time, deadline time.Duration, bound time.Duration, run int, gap time.Duration) (time.Duration, []int64, []time.Duration, bool) {
	var ids []int64
	var lats []time.Duration
	var streakStart time.Time
	streak := 0
	for time.Since(since) < deadline {
		probeAt := time.Now()
		d, id, ok := p.one(3 * time.Second)
		if id != 0 {
			ids = append(ids, id)
		}
		lats = append(lats, d)
		if ok && d <= bound {
			if streak == 0 {
				streakStart = probeAt
			}
			streak++
			if streak >= run {
				return streakStart.Sub(since), ids, lats, true
			}
		} else {
			streak = 0
		}
		time.Sleep(gap)
	}
	return deadline, ids, lats, false
}

func fmtDurs(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, strconv.FormatInt(d.Milliseconds(), 10))
	}
	return "[" + strings.Join(s, " ") + "]ms"
}
