package worker_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// Test args types.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string        { return "noop" }
func (noopArgs) PayloadVersion() int { return 1 }

type failArgs struct {
	Msg string `json:"msg"`
}

func (failArgs) Kind() string        { return "fail" }
func (failArgs) PayloadVersion() int { return 1 }

type slowArgs struct {
	Sleep time.Duration `json:"sleep"`
}

func (slowArgs) Kind() string        { return "slow" }
func (slowArgs) PayloadVersion() int { return 1 }

func testLogger() *slog.Logger {
	if os.Getenv("TENURE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastConfig is a worker config with short polling and sweeps so tests run quickly.
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

func newClient(t testing.TB, pool *pgxpool.Pool, w *worker.Worker) *jobs.Client {
	cfg := &jobs.Config{}
	if w != nil {
		cfg.Registry = w.Registry()
	}
	c, err := jobs.NewClient(pool, cfg)
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

func stopWorker(t testing.TB, w *worker.Worker, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return w.Stop(ctx)
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

func countState(t testing.TB, pool *pgxpool.Pool, state string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.jobs WHERE state = $1", state).Scan(&n))
	return n
}
