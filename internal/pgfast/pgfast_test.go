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

// TestPtrScanSlabs: the **T plans hand out a distinct value per row, each its own (also after
// a row that failed to scan), and allocate slabs, not a value per row: scanning 100 rows of a
// bigint and a timestamptz column allocated 200 values before the slabs, 16 slabs now (and
// the plans themselves).
func TestPtrScanSlabs(t *testing.T) {
	m := pgtype.NewMap()
	pgfast.Register(m)
	base := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	ints, times := make([][]byte, 100), make([][]byte, 100)
	for i := range ints {
		var err error
		ints[i], err = m.Encode(pgtype.Int8OID, pgtype.BinaryFormatCode, int64(i), nil)
		require.NoError(t, err)
		times[i], err = m.Encode(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, base.Add(time.Duration(i)*time.Second), nil)
		require.NoError(t, err)
	}

	iPlan := m.PlanScan(pgtype.Int8OID, pgtype.BinaryFormatCode, new(*int64))
	tPlan := m.PlanScan(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, new(*time.Time))
	gotI, gotT := make([]*int64, 100), make([]*time.Time, 100)
	for i := range ints {
		if i == 50 {
			var p *int64
			require.Error(t, iPlan.Scan([]byte{1, 2, 3}, &p), "a bigint of 3 bytes")
		}
		require.NoError(t, iPlan.Scan(ints[i], &gotI[i]))
		require.NoError(t, tPlan.Scan(times[i], &gotT[i]))
	}
	seen := map[*int64]bool{}
	for i := range gotI {
		require.Equal(t, int64(i), *gotI[i])
		require.True(t, base.Add(time.Duration(i)*time.Second).Equal(*gotT[i]))
		require.False(t, seen[gotI[i]], "row %d shares a value", i)
		seen[gotI[i]] = true
	}

	allocs := testing.AllocsPerRun(20, func() {
		iPlan := m.PlanScan(pgtype.Int8OID, pgtype.BinaryFormatCode, new(*int64))
		tPlan := m.PlanScan(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, new(*time.Time))
		var pi *int64
		var pt *time.Time
		for i := range ints {
			if iPlan.Scan(ints[i], &pi) != nil || tPlan.Scan(times[i], &pt) != nil {
				t.Fatal("scan failed")
			}
		}
	})
	t.Logf("allocations for 100 rows of 2 columns, plans included: %v", allocs)
	require.Less(t, allocs, 40.0)
}
