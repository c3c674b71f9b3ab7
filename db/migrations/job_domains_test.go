package migrations_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
)

// Migration 0014 moves the single-column rules of tenure.jobs from table CHECKs to domains.
// Rows written before it are kept as they were, the table is not rewritten (its file stays the
// same: each domain gets its constraint only after the column changed type), every rule still
// refuses a bad value under the same constraint name (SQLSTATE 23514), and going down restores
// table CHECKs that refuse the same values.
func TestMigration0014KeepsRowsAndRules(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, above := migratedBelow(t, 14)

	// Rows of several shapes under 0013: plain, unique with tags and metadata, finished with an
	// error code and output.
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload) VALUES ('mail', '{"to":"a"}')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT tenure.enqueue('mail', '{"to":"b"}', tags => ARRAY['t1', 'x:y'], metadata => '{"k":"v"}', unique_args => '{}')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, state, attempts, attempted_at, claim_token, generation, finished_at, last_error_code, output, errors)
		VALUES ('mail', '{}', 'dead', 1, now(), gen_random_uuid(), 1, now(), 'TIMEOUT', '{"r":1}', '[{"code":"TIMEOUT"}]')`)
	require.NoError(t, err)
	rows := func() []string {
		var out []string
		// (the columns later migrations add are left out: 0020's workflow columns, 0021's progress)
		r, err := pool.Query(ctx, `SELECT (to_jsonb(j) - 'workflow_id' - 'task_name' - 'sequence_key' - 'deps_pending' - 'has_dependents' - 'progress')::text
			FROM tenure.jobs j ORDER BY id`)
		require.NoError(t, err)
		for r.Next() {
			var s string
			require.NoError(t, r.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, r.Err())
		return out
	}
	file := func() (f int64) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT relfilenode::bigint FROM pg_class WHERE oid = 'tenure.jobs'::regclass`).Scan(&f))
		return f
	}
	before, beforeFile := rows(), file()
	refusesAll(t, pool, "0013")

	_, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, before, rows(), "rows kept")
	require.Equal(t, beforeFile, file(), "0014 does not rewrite the table")
	var domains, checks int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE contypid <> 0), count(*) FILTER (WHERE conrelid = 'tenure.jobs'::regclass)
		FROM pg_constraint WHERE contype = 'c' AND connamespace = 'tenure'::regnamespace AND convalidated
		  AND (contypid <> 0 OR conrelid = 'tenure.jobs'::regclass)`).Scan(&domains, &checks))
	// 0014's 17, less the two size checks 0016 re-adds NOT VALID, plus 0016's jobs_time_range
	require.Equal(t, 16, domains, "validated domain constraints")
	require.Equal(t, 7, checks, "table CHECKs left: the ones relating columns")
	refusesAll(t, pool, "0014")

	_, err = migrations.Down(ctx, pool, above)
	require.NoError(t, err)
	require.Equal(t, before, rows(), "rows kept going down")
	refusesAll(t, pool, "0014 down")
}

// refusesAll checks that each single-column rule of tenure.jobs refuses a bad value with its
// constraint's name.
func refusesAll(t *testing.T, pool *pgxpool.Pool, when string) {
	t.Helper()
	ctx := ctxT(t)
	for _, c := range []struct{ constraint, stmt string }{
		{"jobs_queue_len", `UPDATE tenure.jobs SET queue = '' WHERE id = 1`},
		{"jobs_kind_len", `INSERT INTO tenure.jobs (kind, payload) VALUES (repeat('k', 129), '{}')`},
		{"jobs_payload_object", `INSERT INTO tenure.jobs (kind, payload) VALUES ('k', '[1]')`},
		{"jobs_version_pos", `UPDATE tenure.jobs SET payload_version = 0 WHERE id = 1`},
		{"jobs_priority_range", `UPDATE tenure.jobs SET priority = 10 WHERE id = 1`},
		{"jobs_max_attempts", `UPDATE tenure.jobs SET max_attempts = 1001 WHERE id = 1`},
		{"jobs_lease_range", `UPDATE tenure.jobs SET lease_ms = 999 WHERE id = 1`},
		{"jobs_generation_pos", `UPDATE tenure.jobs SET generation = -1 WHERE id = 1`},
		{"jobs_errors_array", `UPDATE tenure.jobs SET errors = '{}' WHERE id = 1`},
		{"jobs_error_code", `UPDATE tenure.jobs SET last_error_code = 'lower' WHERE id = 1`},
		{"jobs_metadata_object", `UPDATE tenure.jobs SET metadata = '{"n":1}' WHERE id = 1`},
		{"jobs_metadata_size", `UPDATE tenure.jobs SET metadata = jsonb_build_object('k', repeat('x', 9000)) WHERE id = 1`},
		{"jobs_unique_states", `UPDATE tenure.jobs SET unique_states = 4 WHERE id = 2`},
		{"jobs_unique_key_len", `UPDATE tenure.jobs SET unique_key = '\x00' WHERE id = 2`},
		{"jobs_tags_valid", `UPDATE tenure.jobs SET tags = ARRAY['has space'] WHERE id = 1`},
		{"jobs_output_size", `UPDATE tenure.jobs SET output = jsonb_build_object('k', repeat('x', 40000)) WHERE id = 1`},
		{"jobs_snoozes_pos", `UPDATE tenure.jobs SET snoozes = -1 WHERE id = 1`},
		{"jobs_unique_pair", `UPDATE tenure.jobs SET unique_key = NULL WHERE id = 2`},
		{"jobs_attempts_range", `UPDATE tenure.jobs SET attempts = 26 WHERE id = 1`},
		{"jobs_ready_no_token", `UPDATE tenure.jobs SET claim_token = gen_random_uuid() WHERE id = 1`},
	} {
		_, err := pool.Exec(ctx, c.stmt)
		var pe *pgconn.PgError
		require.True(t, errors.As(err, &pe), "%s: %s: %v", when, c.stmt, err)
		require.Equal(t, "23514", pe.Code, "%s: %s: %v", when, c.stmt, err)
		require.Equal(t, c.constraint, pe.ConstraintName, "%s: %s", when, c.stmt)
	}
}
