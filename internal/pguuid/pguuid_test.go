package pguuid_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/pguuid"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestRoundTrip: with the codec registered, uuid.UUID values, pointers, NULLs and slices go to
// the server and back unchanged in every query mode (binary and text formats), the server sees
// the values a plain connection sends, and a NULL scans as it does without the codec (it
// leaves a uuid.UUID as it was; checked against a plain connection when this was written).
func TestRoundTrip(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	c := conn.Conn()
	pguuid.Register(c.TypeMap())

	a, b := uuid.New(), uuid.New()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		var got uuid.UUID
		var text string
		require.NoError(t, c.QueryRow(ctx, `SELECT $1::uuid, $1::uuid::text`, mode, a).Scan(&got, &text))
		require.Equal(t, a, got, "mode %v", mode)
		require.Equal(t, a.String(), text, "mode %v", mode)

		var p, null *uuid.UUID
		require.NoError(t, c.QueryRow(ctx, `SELECT $1::uuid, NULL::uuid`, mode, &b).Scan(&p, &null))
		require.NotNil(t, p)
		require.Equal(t, b, *p)
		require.Nil(t, null)

		var list []uuid.UUID
		var texts []string
		require.NoError(t, c.QueryRow(ctx, `SELECT $1::uuid[], $1::uuid[]::text[]`, mode, []uuid.UUID{a, b}).Scan(&list, &texts))
		require.Equal(t, []uuid.UUID{a, b}, list)
		require.Equal(t, []string{a.String(), b.String()}, texts)

		// NULL into a uuid.UUID leaves it as it was, as uuid.UUID's own Scan does.
		require.NoError(t, c.QueryRow(ctx, `SELECT NULL::uuid`, mode).Scan(&got))
		require.Equal(t, a, got)
	}
	// Other UUID types still work through pgx's own codec.
	var s string
	require.NoError(t, c.QueryRow(ctx, `SELECT $1::uuid::text`, a.String()).Scan(&s))
	require.Equal(t, a.String(), s)
}

// BenchmarkEncodeUUIDs: a 1,000-token array parameter, as CompleteMany sends it, with and
// without the codec.
func BenchmarkEncodeUUIDs(b *testing.B) {
	pool := pgtest.NewPool(b)
	ctx := context.Background()
	ids := make([]uuid.UUID, 1000)
	for i := range ids {
		ids[i] = uuid.New()
	}
	for _, reg := range []bool{false, true} {
		name := "pgx-default"
		if reg {
			name = "pguuid"
		}
		b.Run(name, func(b *testing.B) {
			conn, err := pool.Acquire(ctx)
			require.NoError(b, err)
			defer conn.Release()
			c := conn.Conn()
			if reg {
				pguuid.Register(c.TypeMap())
			}
			b.ResetTimer()
			for range b.N {
				var n int
				if err := c.QueryRow(ctx, `SELECT cardinality($1::uuid[])`, ids).Scan(&n); err != nil || n != 1000 {
					b.Fatal(err, n)
				}
			}
		})
	}
}
