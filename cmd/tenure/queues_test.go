package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

func TestQueueCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()

	r := tenure(t, url, "queue", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "(no queues")

	r = tenure(t, url, "queue", "pause", "mail")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "-actor (who acts) and -reason (why) required")
	r = tenure(t, url, "queue", "pause", "-actor", "ops", "-reason", "r")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "missing queue name")
	r = tenure(t, url, "queue", "pause", "bad queue", "-actor", "ops", "-reason", "r")
	require.Equal(t, 2, r.code)
	r = tenure(t, url, "queue", "frobnicate")
	require.Equal(t, 2, r.code)

	// No worker serves mail yet and it has no jobs: -force (TestQueuePauseRefusesUnknownQueue).
	r = tenure(t, url, "queue", "pause", "mail", "-force", "-actor", "ops@example.com", "-reason", "relay maintenance")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "queue mail paused\n", r.stdout)
	r = tenure(t, url, "queue", "pause", "-actor", "ops@example.com", "-reason", "again", "mail")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "already paused")

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO tenure.workers (id, host, pid, version, queues, started_at, heartbeat_at, expires_at, counters) VALUES
		('w1', 'h1', 11, 'v1', '{"default":{"concurrency":10},"mail":{"concurrency":2,"paused":true}}', now(), now(), now() + interval '30 seconds', '{}')`)
	require.NoError(t, err)
	r = tenure(t, url, "queue", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `default\s+running\s+1\s+-\s+-\s+-`, r.stdout)
	require.Regexp(t, `mail\s+PAUSED\s+1\s+\S+Z\s+ops@example.com\s+again`, r.stdout)
	r = tenure(t, url, "workers")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "default:10,mail:2(paused)")

	r = tenure(t, url, "queue", "resume", "mail", "-actor", "ops@example.com", "-reason", "relay back")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "queue mail resumed\n", r.stdout)
	r = tenure(t, url, "queue", "list")
	require.Regexp(t, `mail\s+running\s+1\s+\S+Z\s+ops@example.com\s+relay back`, r.stdout)
	r = tenure(t, url, "jobs", "audit")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "pause")
	require.Contains(t, r.stdout, "resume")
}

// TestQueuePauseRefusesUnknownQueue: pause or resume of a queue that no live worker serves,
// with no ready, running or dead jobs, no periodic schedule, and not paused, is refused (a
// typo) and leaves nothing behind: no tenure.queues row, no audit row. -force does it anyway.
func TestQueuePauseRefusesUnknownQueue(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	rows := func() (queues, audits int) {
		require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM tenure.queues), (SELECT count(*) FROM tenure.audit)").Scan(&queues, &audits))
		return
	}
	_, err = pool.Exec(ctx, `INSERT INTO tenure.workers (id, host, pid, version, queues, started_at, heartbeat_at, expires_at, counters) VALUES
		('live', 'h1', 1, 'v1', '{"served":{"concurrency":1}}', now(), now(), now() + interval '1 minute', '{}'),
		('gone', 'h2', 2, 'v1', '{"gone":{"concurrency":1}}', now() - interval '1 hour', now() - interval '1 hour', now() - interval '59 minutes', '{}')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload) VALUES ('hasready', 'k', '{}');
		INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, max_attempts, claim_token, generation, attempted_at, finished_at, last_error_code)
		VALUES ('hasdead', 'k', '{}', 'dead', 1, 1, gen_random_uuid(), 1, now(), now(), 'X');
		INSERT INTO tenure.jobs (queue, kind, payload, state, finished_at) VALUES ('onlysucceeded', 'k', '{}', 'succeeded', now());
		INSERT INTO tenure.periodic (name, spec, kind, queue, next_run_at) VALUES ('p', 'every 1h', 'k', 'scheduled', now() + interval '1 hour')`)
	require.NoError(t, err)
	act := []string{"-actor", "ops", "-reason", "r"}
	for _, q := range []string{"nosuchqueue", "gone", "onlysucceeded"} {
		for _, action := range []string{"pause", "resume"} {
			r := tenure(t, url, append([]string{"queue", action, q}, act...)...)
			require.Equal(t, exitFail, r.code, "%s %s: %s", action, q, r.stdout)
			require.Contains(t, r.stderr, "no live worker serves it")
			require.Contains(t, r.stderr, "-force")
			queues, audits := rows()
			require.Zero(t, queues, "a refusal leaves no row behind")
			require.Zero(t, audits, "a refusal is not audited")
		}
	}
	for _, q := range []string{"served", "hasready", "hasdead", "scheduled"} {
		r := tenure(t, url, append([]string{"queue", "pause", q}, act...)...)
		require.Equal(t, exitOK, r.code, "%s: %s", q, r.stderr)
		require.Equal(t, "queue "+q+" paused\n", r.stdout)
	}
	r := tenure(t, url, append([]string{"queue", "pause", "nosuchqueue", "-force"}, act...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	// A paused queue is known: resuming it needs no -force.
	r = tenure(t, url, append([]string{"queue", "resume", "nosuchqueue"}, act...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "queue nosuchqueue resumed\n", r.stdout)
}

func TestPeriodicCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	r := tenure(t, url, "periodic", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "(no periodic schedules)")
	r = tenure(t, url, "periodic", "list", "extra")
	require.Equal(t, 2, r.code)
	r = tenure(t, url, "periodic", "delete")
	require.Equal(t, 2, r.code)

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO tenure.periodic (name, spec, kind, queue, next_run_at, last_tick_at, last_enqueued_at, last_job_id, missed) VALUES
		('nightly', 'cron 30 2 * * * Europe/Berlin', 'report', 'reports', now() + interval '1 hour', '2026-01-01 01:30:00Z', '2026-01-01 01:30:00.5Z', 42, 3),
		('stale', 'every 1s', 'tick', 'default', now() - interval '1 hour', NULL, NULL, NULL, 0)`)
	require.NoError(t, err)
	r = tenure(t, url, "periodic", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `nightly\s+cron 30 2 \* \* \* Europe/Berlin\s+report\s+reports\s+\S+Z\s+42\s+2026-01-01T01:30:00Z\s+2026-01-01T01:30:00.5Z\s+3\s+ok`, r.stdout)
	require.Regexp(t, `stale\s+every 1s\s+tick\s+default\s+\S+Z\s+-\s+-\s+-\s+0\s+OVERDUE 1h0m\d+s`, r.stdout)
}
