package migrations_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
)

// TestMigration0016MovesJobTimesIntoTheWindow: rows a release before 0016 accepted with a
// run_at no reader can hold ('infinity', '-infinity', 4000 BC) are moved to the window's edges,
// every other value is kept, and afterwards the database refuses such values on every path.
func TestMigration0016MovesJobTimesIntoTheWindow(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, above := migratedBelow(t, 16)
	_, err := pool.Exec(ctx, `SELECT tenure.enqueue('k', '{}', run_at => 'infinity');
		INSERT INTO tenure.jobs (kind, payload, run_at) VALUES ('k', '{}', '-infinity');
		SELECT tenure.enqueue('k', '{}', run_at => '4000-01-01 BC');
		SELECT tenure.enqueue('k', '{}', run_at => '2030-05-06 07:08:09.123456+00');
		INSERT INTO tenure.jobs (kind, payload, created_at) VALUES ('k', '{}', 'infinity')`)
	require.NoError(t, err)
	file := func() (f int64) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT relfilenode::bigint FROM pg_class WHERE oid = 'tenure.jobs'::regclass`).Scan(&f))
		return f
	}
	beforeFile := file()
	_, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, beforeFile, file(), "0016 does not rewrite the table")
	rows, err := pool.Query(ctx, `SELECT run_at, created_at FROM tenure.jobs ORDER BY id`)
	require.NoError(t, err)
	var got [][2]time.Time
	for rows.Next() {
		var r [2]time.Time // scanning at all is what failed before: "cannot scan Infinity"
		require.NoError(t, rows.Scan(&r[0], &r[1]))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 5)
	end := time.Date(2199, 12, 31, 23, 59, 59, 0, time.UTC)
	require.True(t, got[0][0].Equal(end), "infinity -> %v", got[0][0])
	require.True(t, got[1][0].Equal(time.Unix(0, 0)), "-infinity -> %v", got[1][0])
	require.True(t, got[2][0].Equal(time.Unix(0, 0)), "4000 BC -> %v", got[2][0])
	require.True(t, got[3][0].Equal(time.Date(2030, 5, 6, 7, 8, 9, 123456000, time.UTC)), "kept: %v", got[3][0])
	require.True(t, got[4][1].Equal(end), "created_at infinity -> %v", got[4][1])
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, run_at) VALUES ('k', '{}', 'infinity')`)
	require.ErrorContains(t, err, "jobs_time_range")

	// Down keeps the rows; up again is a no-op for them.
	_, err = migrations.Down(ctx, pool, above)
	require.NoError(t, err)
	_, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
}
