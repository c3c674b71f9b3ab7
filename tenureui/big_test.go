package tenureui_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/tenureui"
)

// TestListPagesOnALargeTable measures the list pages over HTTP on a table of
// $TENUREUI_BIG_ROWS finished jobs (e.g. 10000000; skipped when unset: it takes minutes),
// plus 1,000 dead and 1,000 ready jobs, and fails when a median page takes over 500 ms.
//
//	TENUREUI_BIG_ROWS=10000000 go test -run TestListPagesOnALargeTable -v -timeout 60m ./tenureui/
func TestListPagesOnALargeTable(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TENUREUI_BIG_ROWS"))
	if n <= 0 {
		t.Skip("set TENUREUI_BIG_ROWS (e.g. 10000000) to run the large-table measurement")
	}
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	start := time.Now()
	for done := 0; done < n; done += 1_000_000 {
		k := min(1_000_000, n-done)
		_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, finished_at, attempted_at, attempts, run_at, created_at)
			SELECT 'q' || (g % 4), 'k' || (g % 20), jsonb_build_object('order', g, 'email', 'user' || g || '@example.com'), 'succeeded',
			       now() - ((($2 - g) / 100.0) || ' seconds')::interval, now() - ((($2 - g) / 100.0) || ' seconds')::interval, 1,
			       now() - ((($2 - g) / 100.0) || ' seconds')::interval, now() - ((($2 - g) / 100.0) || ' seconds')::interval
			FROM generate_series($1::bigint, $1::bigint + $3 - 1) g`, done+1, n, k)
		require.NoError(t, err)
	}
	// Dead and ready jobs created early: under all the newer finished rows.
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, finished_at, attempts, last_error_code)
		SELECT 'q' || (g % 4), 'k' || (g % 20), jsonb_build_object('order', g), 'dead', now(), 1, 'TIMEOUT' FROM generate_series(1, 1000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload) SELECT 'q' || (g % 4), 'k' || (g % 20), jsonb_build_object('order', g) FROM generate_series(1, 1000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE tenure.jobs`)
	require.NoError(t, err)
	t.Logf("loaded %d finished + 2,000 live rows in %v", n, time.Since(start).Round(time.Second))

	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui"})
	require.NoError(t, err)
	b := newClient(t, uiServer(t, h))
	for _, q := range []string{"", "state=succeeded", "state=dead", "state=dead&kind=k3", "state=ready&queue=q1",
		"kind=k7", "queue=q2&priority=2", "q=user4242", "kind=nope", fmt.Sprintf("before=%d", n/2), "/overview"} {
		path := "/ui/jobs?" + q
		if q == "/overview" {
			path = "/ui/"
		}
		var times []time.Duration
		for range 5 {
			t0 := time.Now()
			code, body, _ := b.get(path)
			times = append(times, time.Since(t0))
			require.Equal(t, http.StatusOK, code, body)
		}
		slices.Sort(times)
		t.Logf("GET %-40s median %7.1f ms  max %7.1f ms", path, ms(times[2]), ms(times[4]))
		require.Less(t, times[2], 500*time.Millisecond, path)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
