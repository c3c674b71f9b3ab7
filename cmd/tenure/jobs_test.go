package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

func TestJobsCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	var ready, dead int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload) VALUES ('mail', '{"to":"a@b.c"}') RETURNING id`).Scan(&ready))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, state, attempts, max_attempts, claim_token, generation, attempted_at, finished_at, last_error_code)
		VALUES ('mail', '{}', 'dead', 3, 3, gen_random_uuid(), 3, now(), now(), 'TIMEOUT') RETURNING id`).Scan(&dead))

	r := tenure(t, url, "jobs", "list", "-state", "dead")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "TIMEOUT")
	require.NotContains(t, r.stdout, "\tready")

	r = tenure(t, url, "jobs", "get", itoa(ready))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `{"to": "a@b.c"}`)

	r = tenure(t, url, "jobs", "cancel", itoa(ready))
	require.Equal(t, 1, r.code, "an operator action without actor and reason is refused")
	r = tenure(t, url, "jobs", "cancel", itoa(ready), "-actor", "ops", "-reason", "duplicate")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "cancelled")

	r = tenure(t, url, "jobs", "reinject", itoa(ready), "-actor", "ops", "-reason", "x")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "not dead")
	r = tenure(t, url, "jobs", "reinject", itoa(dead), "-actor", "ops", "-reason", "fixed upstream", "-max-attempts", "5")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "ready, attempts 0/5")

	r = tenure(t, url, "jobs", "audit")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, "ops"))

	r = tenure(t, url, "jobs", "stats")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "default")

	r = tenure(t, url, "jobs", "get", "nope")
	require.Equal(t, 2, r.code)
	r = tenure(t, url, "jobs", "frobnicate")
	require.Equal(t, 2, r.code)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
