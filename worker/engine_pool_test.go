package worker_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/worker"
)

// TestEnginePoolConnectionsAreSetUp: the worker's private engine pool runs the application
// pool's AfterConnect and then its own (EngineAfterConnect), so the engine's connections send
// claim tokens with the binary uuid codec rather than through uuid.UUID's driver.Valuer.
func TestEnginePoolConnectionsAreSetUp(t *testing.T) {
	t.Parallel()
	var appHook atomic.Int32
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) {
		c.AfterConnect = func(context.Context, *pgx.Conn) error { appHook.Add(1); return nil }
	})
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	before := appHook.Load()
	startWorker(t, w)
	ctx := context.Background()
	plan, err := worker.EngineUUIDEncodePlan(ctx, w)
	require.NoError(t, err)
	require.Contains(t, plan, "pguuid", "the engine's uuid encode plan")
	require.Greater(t, appHook.Load(), before, "the application pool's AfterConnect ran on engine connections too")

	// A plain connection would have used the driver.Valuer path (the reason for the codec).
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.NotContains(t, worker.PlainUUIDEncodePlan(conn.Conn()), "pguuid")
}
