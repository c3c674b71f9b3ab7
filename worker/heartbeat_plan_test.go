package worker_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
)

// TestHeartbeatPlanAndLockedRows: the Heartbeat statement finds its jobs through the primary
// key whatever the table holds (it runs every lease/3 for every running job), extends the ones
// it owns, reports a row another session holds locked as owned but not extended without
// waiting for it, and leaves out a job whose token is no longer its own.
func TestHeartbeatPlanAndLockedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, nil)
	params := make([]jobs.InsertManyParams, 20000)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: noopArgs{N: i}}
	}
	_, err := c.InsertManyFast(ctx, params)
	require.NoError(t, err)
	// 50 of them running, as a claim leaves them.
	rows, err := pool.Query(ctx, `UPDATE tenure.jobs SET state = 'running', claim_token = gen_random_uuid(),
		locked_until = now() + interval '30 seconds', locked_by = 'w', attempted_at = now(), attempts = 1, generation = 1
		WHERE id IN (SELECT id FROM tenure.jobs ORDER BY id LIMIT 50) RETURNING id, claim_token`)
	require.NoError(t, err)
	type owned struct {
		ID    int64
		Token uuid.UUID
	}
	running, err := pgx.CollectRows(rows, pgx.RowToStructByPos[owned])
	require.NoError(t, err)
	require.Len(t, running, 50)
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)
	ids := make([]int64, len(running))
	tokens := make([]uuid.UUID, len(running))
	for i, r := range running {
		ids[i], tokens[i] = r.ID, r.Token
	}
	tokens[1] = uuid.New() // job 1 is someone else's now

	sql, names := plantest.SQL(t, "Heartbeat")
	require.Equal(t, []string{"ids", "tokens", "progress"}, names)
	// Progress rides on the heartbeat (worker.Progress): jobs 1 (not ours any more) and 2
	// carry some, the others JSON null (unchanged).
	progress := make([][]byte, len(ids))
	for i := range progress {
		progress[i] = []byte("null")
	}
	progress[1] = []byte(`{"done":1,"total":2,"at":"2026-01-01T00:00:00Z"}`)
	progress[2] = []byte(`{"done":3,"total":4,"at":"2026-01-01T00:00:00Z"}`)
	plan := plantest.Explain(t, pool, true, sql, ids, tokens, progress)
	require.True(t, plantest.Indexes(plan)["jobs_pkey"], "the heartbeat finds its jobs by id")
	plantest.Walk(plan, func(n plantest.Node) {
		require.NotEqual(t, "Seq Scan", n.NodeType, "no sequential scan of %s", n.Relation)
	})

	// Job 0's row locked by another session: the statement neither waits nor extends it.
	locker, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, "SELECT 1 FROM tenure.jobs WHERE id = $1 FOR UPDATE", ids[0])
	require.NoError(t, err)
	got := map[int64]bool{}
	hb, err := pool.Query(ctx, sql, ids, tokens, progress)
	require.NoError(t, err)
	for hb.Next() {
		var id int64
		var cancelRequested, extended bool
		require.NoError(t, hb.Scan(&id, &cancelRequested, &extended))
		_, dup := got[id]
		require.False(t, dup, "job %d returned twice", id)
		got[id] = extended
	}
	require.NoError(t, hb.Err())
	require.Len(t, got, 49, "every owned job, and not the one whose token changed")
	require.NotContains(t, got, ids[1])
	require.False(t, got[ids[0]], "the locked row is owned but not extended")
	for _, id := range ids[2:] {
		require.True(t, got[id], "job %d extended", id)
	}
	// Fenced: the progress of the job whose token changed is not written; the owned one's is.
	// (The EXPLAIN ANALYZE above ran the statement too: its writes are the same.)
	var p1, p2, p3 []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT progress FROM tenure.jobs WHERE id = $1), (SELECT progress FROM tenure.jobs WHERE id = $2),
		(SELECT progress FROM tenure.jobs WHERE id = $3)`, ids[1], ids[2], ids[3]).Scan(&p1, &p2, &p3))
	require.Nil(t, p1, "a stale attempt's progress is never written")
	require.JSONEq(t, string(progress[2]), string(p2))
	require.Nil(t, p3, "JSON null leaves progress as it is")
}
