package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
)

// TestMigration0031TakesExistingWorkflowIDs: the workflows inserted before 0031 get their
// tenure.workflows row (created at their first task's creation), so their ids are taken after
// the upgrade as they were before it; jobs_workflow_idx is no longer unique; down restores the
// unique index and keeps the tasks.
func TestMigration0031TakesExistingWorkflowIDs(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, above := migratedBelow(t, 31)
	_, err := pool.Exec(ctx, `
		INSERT INTO tenure.jobs (kind, payload, workflow_id, task_name, created_at) VALUES
			('k', '{}', '11111111-1111-1111-1111-111111111111', 'a', '2026-01-01 00:00:00+00'),
			('k', '{}', '11111111-1111-1111-1111-111111111111', 'b', '2026-01-02 00:00:00+00'),
			('k', '{}', '22222222-2222-2222-2222-222222222222', 'a', '2026-02-01 00:00:00+00'),
			('k', '{}', NULL, NULL, '2026-03-01 00:00:00+00')`)
	require.NoError(t, err)
	_, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT id::text, created_at::date::text FROM tenure.workflows ORDER BY id`)
	require.NoError(t, err)
	var got [][2]string
	for rows.Next() {
		var r [2]string
		require.NoError(t, rows.Scan(&r[0], &r[1]))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, [][2]string{
		{"11111111-1111-1111-1111-111111111111", "2026-01-01"},
		{"22222222-2222-2222-2222-222222222222", "2026-02-01"},
	}, got)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.workflows (id) VALUES ('22222222-2222-2222-2222-222222222222')`)
	require.ErrorContains(t, err, "workflows_pkey", "an existing workflow's id is taken")
	var unique bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT indisunique FROM pg_index WHERE indexrelid = 'tenure.jobs_workflow_idx'::regclass`).Scan(&unique))
	require.False(t, unique)

	_, err = migrations.Down(ctx, pool, above)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT indisunique FROM pg_index WHERE indexrelid = 'tenure.jobs_workflow_idx'::regclass`).Scan(&unique))
	require.True(t, unique)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs`).Scan(&n))
	require.Equal(t, 4, n)
	_, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
}
