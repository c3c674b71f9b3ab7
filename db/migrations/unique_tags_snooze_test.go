package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
)

// Rows written before 0005 keep working after it (no key, no tags, no output, never snoozed,
// still claimable by the ready index), and 0005 goes down cleanly with unique, tagged,
// snoozed rows present.
func TestMigration0005KeepsExistingRows(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, above := migratedBelow(t, 5)

	var old int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, metadata) VALUES ('mail', '{"to":"a"}', '{"k":"v"}') RETURNING id`).Scan(&old))
	_, err := migrations.Up(ctx, pool)
	require.NoError(t, err)

	var tags []string
	var snoozes int
	var keyNull, statesNull, outputNull bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT tags, snoozes, unique_key IS NULL, unique_states IS NULL, output IS NULL FROM tenure.jobs WHERE id = $1`, old).
		Scan(&tags, &snoozes, &keyNull, &statesNull, &outputNull))
	require.Empty(t, tags)
	require.Zero(t, snoozes)
	require.True(t, keyNull && statesNull && outputNull)

	// the new function enqueues; a unique job and the old job live side by side
	var id int64
	var dup bool
	for i := 0; i < 2; i++ {
		require.NoError(t, pool.QueryRow(ctx, `SELECT id, duplicate FROM tenure.enqueue('mail', '{"to":"a"}', tags => ARRAY['t'], unique_args => '{}')`).Scan(&id, &dup))
		require.Equal(t, i == 1, dup)
	}
	require.NotEqual(t, old, id)
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET snoozes = 3, output = '{"a":1}' WHERE id = $1`, id)
	require.NoError(t, err)

	// bad rows are refused by the CHECKs
	for _, bad := range []string{
		`UPDATE tenure.jobs SET tags = ARRAY['has space'] WHERE id = $1`,
		`UPDATE tenure.jobs SET tags = ARRAY[NULL]::text[] WHERE id = $1`,
		`UPDATE tenure.jobs SET unique_states = 4 WHERE id = $1`,
		`UPDATE tenure.jobs SET unique_key = NULL WHERE id = $1`,
		`UPDATE tenure.jobs SET snoozes = -1 WHERE id = $1`,
	} {
		_, err := pool.Exec(ctx, bad, id)
		require.Error(t, err, bad)
	}

	reverted, err := migrations.Down(ctx, pool, above)
	require.NoError(t, err)
	require.Len(t, reverted, above)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs`).Scan(&n))
	require.Equal(t, 2, n)
	var fn bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regproc('tenure.enqueue') IS NOT NULL OR to_regproc('tenure.unique_key') IS NOT NULL`).Scan(&fn))
	require.False(t, fn, "0005 down drops its functions")
}
