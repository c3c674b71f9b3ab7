package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
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
	require.Equal(t, exitUsage, r.code, "an operator action without actor and reason is refused")
	require.Contains(t, r.stderr, "-actor")
	require.Contains(t, r.stderr, "-reason")
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

// The newcomer's paper cuts: a missing -actor/-reason is named, a bad -state is one short line,
// -json works, stats rows are sorted and unserved queues flagged, retry and delete are audited.
func TestJobsCommandsFirstHour(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	insert := func(sql string) int64 {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&id))
		return id
	}
	ready := insert(`INSERT INTO tenure.jobs (kind, payload, run_at) VALUES ('mail', '{}', now() + interval '1 hour') RETURNING id`)
	dead := insert(`INSERT INTO tenure.jobs (kind, payload, state, attempts, max_attempts, claim_token, generation, attempted_at, finished_at, last_error_code)
		VALUES ('mail', '{}', 'dead', 3, 3, gen_random_uuid(), 3, now(), now(), 'TIMEOUT') RETURNING id`)
	// A queue nobody serves: ready for ten minutes, nothing running.
	insert(`INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at) VALUES ('mial', 'mail', '{}', 3, now() - interval '10 minutes') RETURNING id`)
	insert(`INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at) VALUES ('mial', 'mail', '{}', 1, now() - interval '10 minutes') RETURNING id`)
	insert(`INSERT INTO tenure.jobs (queue, kind, payload, priority) VALUES ('alpha', 'mail', '{}', 2) RETURNING id`)

	for _, action := range []string{"cancel", "retry", "reinject", "delete"} {
		r := tenure(t, url, "jobs", action, itoa(ready), "-reason", "x")
		require.Equal(t, exitUsage, r.code, action)
		require.Contains(t, r.stderr, "-actor", action)
		require.NotContains(t, r.stderr, "-reason (why)", action)
	}

	r := tenure(t, url, "jobs", "list", "-state", "bogus")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown state "bogus"`)
	require.LessOrEqual(t, strings.Count(r.stderr, "\n"), 2, "a short error, not the usage:\n%s", r.stderr)
	r = tenure(t, url, "jobs", "list", "-limit", "x")
	require.Equal(t, exitUsage, r.code)
	require.LessOrEqual(t, strings.Count(r.stderr, "\n"), 2, "a short error, not the usage:\n%s", r.stderr)
	require.Contains(t, r.stderr, "tenure jobs list -h")

	r = tenure(t, url, "jobs", "list", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var page jsonPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Jobs, 5)
	r = tenure(t, url, "jobs", "get", itoa(dead), "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var row jsonJob
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &row))
	require.Equal(t, string(generics.JobStateDead), row.State)
	r = tenure(t, url, "jobs", "stats", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var st jsonStats
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	var order []string
	for _, b := range st.Bands {
		order = append(order, fmt.Sprintf("%s/%d", b.Queue, b.Priority))
	}
	require.Equal(t, []string{"alpha/2", "default/2", "mial/3", "mial/1"}, order)
	require.Len(t, st.Unserved, 1)
	require.Equal(t, "mial", st.Unserved[0].Queue)

	r = tenure(t, url, "jobs", "stats")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "UNSERVED?")
	require.Contains(t, r.stderr, `queue "mial"`)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.True(t, strings.HasPrefix(lines[1], "alpha"), r.stdout)
	require.True(t, strings.HasPrefix(lines[2], "default"), r.stdout)

	// retry: a scheduled ready job becomes due now; a dead one goes back to ready.
	r = tenure(t, url, "jobs", "retry", itoa(ready), "-actor", "ops", "-reason", "customer waiting")
	require.Equal(t, 0, r.code, r.stderr)
	var due bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT run_at <= now() FROM tenure.jobs WHERE id = $1", ready).Scan(&due))
	require.True(t, due)
	r = tenure(t, url, "jobs", "retry", itoa(dead), "-actor", "ops", "-reason", "fixed upstream")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "ready")

	// delete
	r = tenure(t, url, "jobs", "delete", itoa(dead), "-actor", "ops", "-reason", "test data")
	require.Equal(t, 0, r.code, r.stderr)
	r = tenure(t, url, "jobs", "get", itoa(dead))
	require.Equal(t, exitFail, r.code)
	require.Contains(t, r.stderr, "not found")

	r = tenure(t, url, "jobs", "audit")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "retry")
	require.Contains(t, r.stdout, "delete")
}

func TestJobsListByTagAndGetShowsNewColumns(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	var a, b int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM tenure.enqueue('mail', '{"to":"a@b.c"}', tags => ARRAY['tenant:1', 'vip'], unique_args => '{}')`).Scan(&a))
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM tenure.enqueue('mail', '{"to":"x@y.z"}', tags => ARRAY['tenant:2', 'vip'])`).Scan(&b))

	r := tenure(t, url, "jobs", "list", "-tag", "vip", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var page jsonPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Jobs, 2)
	r = tenure(t, url, "jobs", "list", "-tag", "vip", "-tag", "tenant:2", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Jobs, 1)
	require.Equal(t, b, page.Jobs[0].ID)
	r = tenure(t, url, "jobs", "list", "-tag", "bad tag")
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "Tags")

	r = tenure(t, url, "jobs", "get", itoa(a))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "tenant:1 vip")
	require.Contains(t, r.stdout, "held while [ready running]")
}

// TestJobsStatsShowsJobsNoLiveWorkerCanRun: from the worker registry and the kinds workers
// publish, stats names the ready jobs no live worker can run (a queue none serves, a kind
// none registers), in the table, on stderr and in -json.
func TestJobsStatsShowsJobsNoLiveWorkerCanRun(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	exec := func(sql string) {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	// One live worker serving "alpha" with kind "mail"; one expired worker serving "beta".
	exec(`INSERT INTO tenure.workers (id, host, pid, version, queues, started_at, heartbeat_at, expires_at)
		VALUES ('w1', 'h', 1, 'v', '{"alpha": {"concurrency": 1}}', now(), now(), now() + interval '1 hour'),
		       ('w0', 'h', 2, 'v', '{"beta": {"concurrency": 1}}', now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour')`)
	exec(`INSERT INTO tenure.kinds (kind, worker_id, queue, priority, max_attempts, lease_ms, timeout_ms)
		VALUES ('mail', 'w1', 'alpha', 2, 25, 30000, 60000), ('sms', 'w0', 'beta', 2, 25, 30000, 60000)`)
	exec(`INSERT INTO tenure.jobs (queue, kind, payload) VALUES ('alpha', 'mail', '{}'), ('alpha', 'sms', '{}'),
		('mail', 'mail', '{}'), ('mail', 'mail', '{}'), ('beta', 'sms', '{}')`)

	r := tenure(t, url, "jobs", "stats", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var st jsonStats
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	served := map[string]bool{}
	unserved := map[string]int64{}
	for _, b := range st.Bands {
		served[b.Queue] = b.QueueServed
		unserved[b.Queue] += b.UnservedJobs
	}
	require.Equal(t, map[string]bool{"alpha": true, "beta": false, "mail": false}, served)
	require.Equal(t, map[string]int64{"alpha": 1, "beta": 1, "mail": 2}, unserved)
	require.Equal(t, []jsonUnservedKind{
		{Queue: "mail", Kind: "mail", Ready: 2, QueueServed: false, KindRegistered: true},
		{Queue: "alpha", Kind: "sms", Ready: 1, QueueServed: true, KindRegistered: false},
		{Queue: "beta", Kind: "sms", Ready: 1, QueueServed: false, KindRegistered: false},
	}, st.UnservedKinds)

	r = tenure(t, url, "jobs", "stats")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "NO LIVE WORKER")
	require.Regexp(t, `(?m)^alpha\s+sms\s+1\s+no live worker registers the kind$`, r.stdout)
	require.Contains(t, r.stderr, `queue "mail", kind "mail": 2 ready jobs no live worker can run: no live worker serves the queue`)
	require.Regexp(t, `(?m)^alpha\s+2\s+2\s+0\s+0\s+0\s+.*\syes\s+1\s*$`, r.stdout)
}

// TestJobsStatsShowsDeleteOnSuccessKinds: the kinds workers publish as deleting their
// succeeded jobs (tenure.kinds.delete_on_success) are listed, so 0 succeeded has its reason.
func TestJobsStatsShowsDeleteOnSuccessKinds(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO tenure.kinds (kind, worker_id, queue, priority, max_attempts, lease_ms, timeout_ms, delete_on_success)
		VALUES ('thumb', 'w1', 'media', 2, 25, 30000, 60000, true), ('mail', 'w1', 'alpha', 2, 25, 30000, 60000, false),
		       ('thumb', 'w2', 'media', 2, 25, 30000, 60000, true)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload) VALUES ('media', 'thumb', '{}')`)
	require.NoError(t, err)

	r := tenure(t, url, "jobs", "stats", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var st jsonStats
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, []string{"thumb"}, st.DeleteOnSuccessKinds)

	r = tenure(t, url, "jobs", "stats")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "DELETES ON SUCCESS")
	require.Regexp(t, `(?m)^thumb\s+deletes on success: its succeeded jobs leave no row`, r.stdout)
	require.NotRegexp(t, `(?m)^mail\s+deletes on success`, r.stdout)
}

// TestJobsGetProgressTimesAndEarlierErrors: jobs get shows a running job's progress, elapsed
// time and timeout, the created/finished times and metadata, and a succeeded job's error
// history as its earlier attempts' (with their progress and output), in text and -json.
func TestJobsGetProgressTimesAndEarlierErrors(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO tenure.kinds (kind, worker_id, queue, priority, max_attempts, lease_ms, timeout_ms)
		VALUES ('report', 'w1', 'default', 2, 25, 30000, 600000)`)
	require.NoError(t, err)
	var running, done int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, state, attempts, claim_token, generation, attempted_at, locked_by, locked_until, metadata, progress)
		VALUES ('report', '{}', 'running', 1, gen_random_uuid(), 1, now() - interval '90 seconds', 'w1', now() + interval '30 seconds', '{"req":"r-1"}',
		        '{"done":30,"total":120,"msg":"rows","at":"2026-01-02T03:04:05Z"}') RETURNING id`).Scan(&running))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, state, attempts, claim_token, generation, attempted_at, finished_at, last_error_code, errors)
		VALUES ('report', '{}', 'succeeded', 2, gen_random_uuid(), 2, now(), now(), 'BOOM',
		        jsonb_build_array(jsonb_build_object('attempt', 1, 'generation', 1, 'code', 'BOOM', 'message', 'm', 'at', now(),
		                          'output', '{"partial":1}'::jsonb, 'progress', '{"done":5,"total":10,"at":"2026-01-02T03:04:05Z"}'::jsonb))) RETURNING id`).Scan(&done))

	r := tenure(t, url, "jobs", "get", itoa(running))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "progress")
	require.Contains(t, r.stdout, "30 of 120 (25%): rows")
	require.Contains(t, r.stdout, "timeout 10m0s")
	require.Contains(t, r.stdout, "running for 1m3") // claimed 90 s ago (and the time the command took)
	require.Contains(t, r.stdout, "metadata")
	require.Contains(t, r.stdout, "req=r-1")
	require.Contains(t, r.stdout, "created")
	require.NotContains(t, r.stdout, "earlier attempts")

	r = tenure(t, url, "jobs", "get", itoa(running), "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var doc struct {
		Progress       *generics.Progress `json:"progress"`
		TimeoutSeconds *float64           `json:"timeout_seconds"`
		ElapsedSeconds *float64           `json:"elapsed_seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.EqualValues(t, 30, doc.Progress.Done)
	require.Equal(t, 600.0, *doc.TimeoutSeconds)
	require.GreaterOrEqual(t, *doc.ElapsedSeconds, 90.0)

	r = tenure(t, url, "jobs", "get", itoa(done))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "succeeded at attempt 2; the errors below are earlier attempts'")
	require.Contains(t, r.stdout, "finished")
	require.Contains(t, r.stdout, "progress 5 of 10 (50%)")
	require.Contains(t, r.stdout, `output {"partial": 1}`)

	r = tenure(t, url, "jobs", "list", "-state", "succeeded")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "(earlier BOOM)")
}
