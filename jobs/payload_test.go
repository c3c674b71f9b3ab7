package jobs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// TestInsertRejectsNULAndInvalidUTF8 checks every insert path refuses args that jsonb cannot
// store as given — a NUL (SQLSTATE 22P05 if it got there) and invalid UTF-8 (silently replaced
// by U+FFFD if it got there) — with a *generics.PayloadError before any round trip, and
// writes nothing.
func TestInsertRejectsNULAndInvalidUTF8(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	_, err = c.Insert(ctx, emailArgs{To: "a@b.c"}, nil)
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		args   emailArgs
		reason error
	}{
		{"nul", emailArgs{To: "a@b.c", Subject: "hi\x00there"}, generics.ErrNULCharacter},
		{"invalid utf8", emailArgs{To: "a@b.c", Subject: "caf\xe9"}, generics.ErrInvalidUTF8},
	} {
		check := func(path string, err error) {
			t.Helper()
			require.Error(t, err, "%s via %s", tc.name, path)
			require.ErrorIs(t, err, generics.ErrInvalidPayload, path)
			require.ErrorIs(t, err, tc.reason, path)
			var perr *generics.PayloadError
			require.True(t, errors.As(err, &perr), path)
			require.Equal(t, "subject", perr.Path, path)
			require.Contains(t, err.Error(), "field subject", path)
			var pgErr interface{ SQLState() string }
			require.False(t, errors.As(err, &pgErr), "%s via %s reached the database: %v", tc.name, path, err)
		}
		_, err := c.Insert(ctx, tc.args, nil)
		check("Insert", err)

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = c.InsertTx(ctx, tx, tc.args, nil)
		check("InsertTx", err)
		// nothing reached the database, so the caller's transaction is still usable
		_, err = tx.Exec(ctx, "SELECT 1")
		require.NoError(t, err, "InsertTx aborted the caller's transaction")
		require.NoError(t, tx.Rollback(ctx))

		many := []jobs.InsertManyParams{{Args: emailArgs{To: "x@y.z"}}, {Args: emailArgs{To: "x@y.z"}}, {Args: tc.args}}
		_, err = c.InsertMany(ctx, many)
		check("InsertMany", err)
		require.Contains(t, err.Error(), "job 2 of 3", "InsertMany names the row")

		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := c.InsertManyTx(ctx, tx, many)
			return err
		})
		check("InsertManyTx", err)
		require.Contains(t, err.Error(), "job 2 of 3")
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
	require.Equal(t, 1, n, "only the valid job was written")
}
