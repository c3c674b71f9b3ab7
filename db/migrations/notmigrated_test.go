package migrations_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/pgtest"
)

// TestWrapNotMigrated: the errors of statements on a missing Tenure schema (no schema at all,
// the schema without the table, a missing function or type) become ErrNotMigrated with the
// hint, keeping the database error reachable; other errors, including a missing table of
// another schema, are returned unchanged.
func TestWrapNotMigrated(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewEmptyDB(t), 2)

	missing := []string{
		"SELECT id FROM tenure.jobs",                    // schema missing: 42P01 on the relation
		"SELECT tenure.enqueue('k', '{}')",              // schema missing: 3F000
		"SELECT 'ready'::tenure.job_state",              // 3F000 / 42704
		"CREATE SCHEMA tenure",                          // (creates it, for the next ones)
		"SELECT id FROM tenure.jobs",                    // 42P01
		"SELECT tenure.cancel_job(1::bigint, 'a', 'b')", // 42883
		"SELECT 'ready'::tenure.job_state",              // 42704
		"INSERT INTO tenure.jobs (kind) VALUES ('k')",   // 42P01
	}
	for _, sql := range missing {
		_, err := pool.Exec(ctx, sql)
		if strings.HasPrefix(sql, "CREATE") {
			require.NoError(t, err)
			continue
		}
		require.Error(t, err, sql)
		require.True(t, migrations.IsMissingSchemaObject(err), "%s: %v", sql, err)
		wrapped := migrations.WrapNotMigrated(fmt.Errorf("tenure: doing it: %w", err))
		require.ErrorIs(t, wrapped, migrations.ErrNotMigrated, sql)
		require.Contains(t, wrapped.Error(), migrations.Hint, sql)
		require.Contains(t, wrapped.Error(), err.Error(), "the database's words stay in the message")
		var pe *pgconn.PgError
		require.ErrorAs(t, wrapped, &pe, sql)
		var nm *migrations.NotMigratedError
		require.ErrorAs(t, wrapped, &nm)
		require.Equal(t, migrations.Latest(), nm.Latest)
		require.Same(t, wrapped, migrations.WrapNotMigrated(wrapped), "wrapping twice changes nothing")
	}

	for _, sql := range []string{
		"SELECT id FROM public.nosuch", // a missing table, but not Tenure's
		"SELECT public.nosuch_fn()",    // a missing function, not Tenure's
		"SELECT 1/0",                   // any other error
	} {
		_, err := pool.Exec(ctx, sql)
		require.Error(t, err, sql)
		require.False(t, migrations.IsMissingSchemaObject(err), sql)
		require.Same(t, err, migrations.WrapNotMigrated(err), sql)
	}
	require.NoError(t, migrations.WrapNotMigrated(nil))
	plain := errors.New("relation \"tenure.jobs\" does not exist") // text alone is not a database error
	require.Same(t, plain, migrations.WrapNotMigrated(plain))
}

// TestCheck: an empty database, one behind, one up to date and one ahead.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	empty := openPool(t, pgtest.NewEmptyDB(t), 2)
	err := migrations.Check(ctx, empty)
	require.ErrorIs(t, err, migrations.ErrNotMigrated)
	require.Contains(t, err.Error(), "no migration applied")
	require.Contains(t, err.Error(), migrations.Hint)
	var nm *migrations.NotMigratedError
	require.ErrorAs(t, err, &nm)
	require.Len(t, nm.Pending, len(migrations.All()))

	all := migrations.All()
	last := all[len(all)-1]
	behind, _ := migratedBelow(t, last.Version)
	err = migrations.Check(ctx, behind)
	require.ErrorIs(t, err, migrations.ErrNotMigrated)
	require.Contains(t, err.Error(), fmt.Sprintf("migration(s) %d not applied", last.Version))
	require.Contains(t, err.Error(), migrations.Hint)

	_, err = migrations.Up(ctx, behind)
	require.NoError(t, err)
	require.NoError(t, migrations.Check(ctx, behind))

	_, err = behind.Exec(ctx, "INSERT INTO tenure.schema_migrations (version, name) VALUES ($1, 'future')", last.Version+1)
	require.NoError(t, err)
	err = migrations.Check(ctx, behind)
	require.ErrorIs(t, err, migrations.ErrSchemaTooNew)
	require.NotErrorIs(t, err, migrations.ErrNotMigrated)
}
