package pgfast_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgfast"
	"github.com/tenureq/tenure/internal/pgtest"
)

// TestPlansMatchPgx scans and encodes the same values through a connection with the plans and
// one without, and requires the same results (NULLs included).
func TestPlansMatchPgx(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const q = `SELECT $1::uuid, $2::uuid[], v.i8, v.i4, v.i2, v.s, v.t, v.u, v.b
FROM (VALUES (7::bigint, 6::int, 5::smallint, 'x'::text, '2026-12-03 07:00:00.123456+00'::timestamptz, $1::uuid, true),
             (NULL, NULL, NULL, NULL, NULL, NULL, NULL)) AS v(i8, i4, i2, s, t, u, b)`
	type row struct {
		U  uuid.UUID
		Us []uuid.UUID
		I8 *int64
		I4 *int32
		I2 *int16
		S  *string
		T  *time.Time
		UP *uuid.UUID
		B  *bool
	}
	id := uuid.New()
	ids := []uuid.UUID{uuid.New(), uuid.Nil, id}
	run := func(fast bool) []row {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		conn, err := pgx.ConnectConfig(ctx, c.Conn().Config())
		require.NoError(t, err)
		defer conn.Close(ctx)
		if fast {
			m := conn.TypeMap()
			pgfast.Register(m)
			// The plans are the ones taken (not pgx's fallbacks).
			require.Contains(t, fmt.Sprintf("%T", m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuid.UUID{})), "pgfast")
			for _, target := range []any{new(*int64), new(*uuid.UUID), new(*time.Time)} {
				oid := map[string]uint32{"**int64": pgtype.Int8OID, "**uuid.UUID": pgtype.UUIDOID, "**time.Time": pgtype.TimestamptzOID}[fmt.Sprintf("%T", target)]
				require.Contains(t, fmt.Sprintf("%T", m.PlanScan(oid, pgtype.BinaryFormatCode, target)), "pgfast")
			}
		}
		var out []row
		for range 2 { // the second pass runs the memoized plans
			rows, err := conn.Query(ctx, q, id, ids)
			require.NoError(t, err)
			for rows.Next() {
				var r row
				r.UP = &uuid.UUID{1} // NULL must overwrite
				r.I8 = new(int64)
				require.NoError(t, rows.Scan(&r.U, &r.Us, &r.I8, &r.I4, &r.I2, &r.S, &r.T, &r.UP, &r.B))
				out = append(out, r)
			}
			require.NoError(t, rows.Err())
		}
		return out
	}
	fast, slow := run(true), run(false)
	require.Len(t, fast, 4)
	require.Equal(t, slow, fast)
	require.Equal(t, id, fast[0].U)
	require.Equal(t, ids, fast[0].Us)
	require.Equal(t, int64(7), *fast[0].I8)
	require.Equal(t, id, *fast[0].UP)
	require.Nil(t, fast[1].I8)
	require.Nil(t, fast[1].UP)
	require.Nil(t, fast[1].T)
}
