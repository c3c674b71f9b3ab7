package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

func TestWorkersCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()

	r := tenure(t, url, "workers")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "(no registered workers)")

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO tenure.workers (id, host, pid, version, queues, started_at, heartbeat_at, expires_at, counters) VALUES
		('w-live', 'h1', 11, 'v1.2.3', '{"default":{"concurrency":10},"mail":{"concurrency":2}}', now() - interval '1 hour', now(), now() + interval '30 seconds', '{"succeeded":7,"running":3}'),
		('w-gone', 'h2', 22, 'v1.2.3', '{}', now() - interval '2 hours', now() - interval '1 hour', now() - interval '59 minutes', '{}')`)
	require.NoError(t, err)
	r = tenure(t, url, "workers")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `w-gone\s+h2\s+22\s+v1.2.3\s+.*EXPIRED`, r.stdout)
	require.Regexp(t, `w-live\s+h1\s+11\s+v1.2.3\s+default:10,mail:2\s+1h0m0s\s+.*\s3\s+7\s+0\s+0\s+ok`, r.stdout)

	r = tenure(t, url, "workers", "extra")
	require.Equal(t, 2, r.code)
}
