package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// TestInsertIntoUnmigratedDatabase: every insert path on a database that was never migrated
// returns an error that errors.Is migrations.ErrNotMigrated and carries the hint, instead of
// a bare `relation "tenure.jobs" does not exist`.
func TestInsertIntoUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	defer pool.Close()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	args := emailArgs{To: "a@b.c"}
	uniq := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{}}
	many := []jobs.InsertManyParams{{Args: args}, {Args: args, Opts: &jobs.InsertOpts{Delay: time.Hour}}}
	manyUnique := []jobs.InsertManyParams{{Args: args, Opts: uniq}}
	inTx := func(f func(tx pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, pool, f)
	}
	for name, call := range map[string]func() error{
		"Insert":        func() error { _, err := c.Insert(ctx, args, nil); return err },
		"Insert unique": func() error { _, err := c.Insert(ctx, args, uniq); return err },
		"InsertTx": func() error {
			return inTx(func(tx pgx.Tx) error { _, err := c.InsertTx(ctx, tx, args, nil); return err })
		},
		"InsertMany":        func() error { _, err := c.InsertMany(ctx, many); return err },
		"InsertMany unique": func() error { _, err := c.InsertMany(ctx, manyUnique); return err },
		"InsertManyTx": func() error {
			return inTx(func(tx pgx.Tx) error { _, err := c.InsertManyTx(ctx, tx, many); return err })
		},
		"InsertManyFast":         func() error { _, err := c.InsertManyFast(ctx, many[:1]); return err },
		"InsertManyFast delayed": func() error { _, err := c.InsertManyFast(ctx, many); return err },
		"InsertManyFastTx": func() error {
			return inTx(func(tx pgx.Tx) error { _, err := c.InsertManyFastTx(ctx, tx, many[:1]); return err })
		},
	} {
		err := call()
		require.ErrorIs(t, err, migrations.ErrNotMigrated, "%s: %v", name, err)
		require.Contains(t, err.Error(), migrations.Hint, name)
	}
}
