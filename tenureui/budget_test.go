package tenureui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/tenureui"
)

// maxRequestAlloc bounds the bytes the whole process (server, pgx, client) allocates for one
// dashboard request in these tests, whatever the stored data: the pages read bounded heads
// of the stored values, so a request costs about the same for a 20-byte and a 20-MB value.
const maxRequestAlloc = 48 << 20

// measured is one GET: status, body, headers, and the bytes the process allocated for it.
type measured struct {
	code  int
	body  string
	hdr   http.Header
	alloc uint64
}

// getMeasured runs one GET and measures the process's allocations around it. The tests that
// use it are not parallel: they run alone, so the MemStats delta is this request's.
func getMeasured(t *testing.T, base, path string) measured {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := http.Get(base + path)
	require.NoError(t, err, path)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, path)
	runtime.ReadMemStats(&after)
	return measured{code: resp.StatusCode, body: string(body), hdr: resp.Header, alloc: after.TotalAlloc - before.TotalAlloc}
}

// hostileArgs is the class of args the budget tests store: each case is an SQL expression of
// a jsonb object built from the scale n, so the same shape is tried small and large.
var hostileArgs = []struct {
	name string
	sql  string // jsonb expression of n ($1)
}{
	{"nested-arrays", `('{"a":' || repeat('[', $1) || repeat(']', $1) || '}')::jsonb`},
	{"nested-objects", `(repeat('{"a":', $1) || '1' || repeat('}', $1))::jsonb`},
	{"nested-mixed", `('{"a":' || repeat('[{"b":', $1 / 2) || '"<\"x\">"' || repeat('}]', $1 / 2) || '}')::jsonb`},
	{"wide-object", `(SELECT jsonb_object_agg('k"<' || g, '&''' || g) FROM generate_series(1, $1) g)`},
	{"wide-array-of-empties", `jsonb_build_object('a', (SELECT jsonb_agg('[]'::jsonb) FROM generate_series(1, $1) g))`},
	{"wide-array-of-quotes", `jsonb_build_object('a', (SELECT jsonb_agg('"''<>&+'::text) FROM generate_series(1, $1) g))`},
	{"huge-string-markup", `jsonb_build_object('s', repeat('<"''&>+', $1 * 4))`},
	{"huge-string-script-controls", `jsonb_build_object('s', repeat(E'</pre><script>alert(1)</script>\u0001\u001f\t\r\n', $1))`},
}

// insertHostile stores a dead job whose args are expr at scale n, by direct SQL (as an
// application with write access could), and returns its id.
func insertHostile(t *testing.T, pool *pgxpool.Pool, expr string, n int) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO tenure.jobs
		(queue, kind, payload, state, attempts, max_attempts, generation, last_error_code, finished_at, attempted_at)
		VALUES ('hostile', 'hostile', `+expr+`, 'dead', 1, 1, 1, 'TIMEOUT', now(), now()) RETURNING id`, n).Scan(&id))
	return id
}

// TestJobPageOfArgsNestedNineThousandLevels reproduces issue 29 item 6: args nested 9,000
// levels (18 KB, under the 64 KiB enqueue limit) made the job page 162 MB, because the
// indentation of each line grew with its depth. The page now stays within MaxJobPageBytes
// and the request within maxRequestAlloc.
func TestJobPageOfArgsNestedNineThousandLevels(t *testing.T) {
	pool := pgtest.NewPool(t)
	id := insertHostile(t, pool, hostileArgs[0].sql, 9000)
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui"})
	require.NoError(t, err)
	base := uiServer(t, h)
	for _, p := range []string{fmt.Sprintf("/ui/jobs/%d", id), fmt.Sprintf("/ui/jobs/%d?partial=1", id)} {
		m := getMeasured(t, base, p)
		require.Equal(t, http.StatusOK, m.code, p)
		t.Logf("GET %s: %d bytes, %d bytes allocated", p, len(m.body), m.alloc)
		require.LessOrEqual(t, len(m.body), tenureui.MaxJobPageBytes, "%s: page over its budget", p)
		require.LessOrEqual(t, m.alloc, uint64(maxRequestAlloc), "%s: request allocated over its budget", p)
	}
}

// TestPagesStayWithinBudget stores the class of hostile args (deep nesting of arrays, objects
// and both, very wide objects and arrays, huge strings of markup, script and control
// characters), each at a small and a large scale, plus a job whose every other displayed
// column is hostile (a 5,000-entry error history of long messages, metadata, output, 300
// effects and 300 audit entries), plus more jobs than a list page with large args. Every
// page (job page, its live part, list pages, searches) stays within its byte budget and
// every request within maxRequestAlloc at both scales; the raw endpoint serves the stored
// value exactly, or refuses it when it is over Config.MaxRawBytes.
func TestPagesStayWithinBudget(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const rawMax = 1 << 20
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui", MaxRawBytes: rawMax})
	require.NoError(t, err)
	base := uiServer(t, h)
	listBudget := tenureui.MaxListPageBytes(tenureui.DefaultPageSize)

	checkJob := func(name string, id int64) {
		t.Helper()
		for _, p := range []string{fmt.Sprintf("/ui/jobs/%d", id), fmt.Sprintf("/ui/jobs/%d?partial=1", id)} {
			m := getMeasured(t, base, p)
			require.Equal(t, http.StatusOK, m.code, "%s %s: %.300s", name, p, m.body)
			t.Logf("%-28s GET %-28s %8d bytes, %10d allocated", name, p, len(m.body), m.alloc)
			require.LessOrEqual(t, len(m.body), tenureui.MaxJobPageBytes, "%s %s: page over its budget", name, p)
			require.LessOrEqual(t, m.alloc, uint64(maxRequestAlloc), "%s %s: request allocated over its budget", name, p)
			require.NotContains(t, m.body, "<script>alert", "%s: markup shown unescaped", name)
		}
	}
	checkRaw := func(name string, id int64, field, column string) {
		t.Helper()
		var stored *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT `+column+`::text FROM tenure.jobs WHERE id = $1`, id).Scan(&stored))
		p := fmt.Sprintf("/ui/jobs/%d/raw/%s", id, field)
		m := getMeasured(t, base, p)
		t.Logf("%-28s GET %-28s %8d bytes, %10d allocated (stored %d)", name, p, len(m.body), m.alloc, len(deref(stored)))
		require.LessOrEqual(t, m.alloc, uint64(maxRequestAlloc), "%s %s: request allocated over its budget", name, p)
		switch {
		case stored == nil:
			require.Equal(t, http.StatusNotFound, m.code, "%s %s", name, p)
		case len(*stored) <= rawMax:
			require.Equal(t, http.StatusOK, m.code, "%s %s", name, p)
			require.Equal(t, "application/json", m.hdr.Get("Content-Type"))
			require.Contains(t, m.hdr.Get("Content-Disposition"), "attachment")
			require.Equal(t, fmt.Sprint(len(*stored)), m.hdr.Get("Content-Length"))
			require.True(t, m.body == *stored, "%s %s: raw value differs from the stored one", name, p)
		default:
			require.Equal(t, http.StatusRequestEntityTooLarge, m.code, "%s %s", name, p)
			require.LessOrEqual(t, len(m.body), 16<<10)
		}
	}

	for _, c := range hostileArgs {
		for _, n := range []int{200, 9000} {
			name := fmt.Sprintf("%s/%d", c.name, n)
			id := insertHostile(t, pool, c.sql, n)
			checkJob(name, id)
			checkRaw(name, id, "args", "payload")
		}
	}
	// A 4 MB string: over MaxRawBytes, refused by the raw endpoint, truncated on the page.
	big := insertHostile(t, pool, `jsonb_build_object('s', repeat('<"''&>+', $1))`, 700_000)
	checkJob("huge-string-4MB", big)
	checkRaw("huge-string-4MB", big, "args", "payload")
	m := getMeasured(t, base, fmt.Sprintf("/ui/jobs/%d", big))
	require.Contains(t, m.body, fmt.Sprintf("/ui/jobs/%d/raw/args", big), "a truncated value links to its raw value")

	// Every other displayed column hostile at once, larger than today's limits allow: rows
	// written before migration 0016 may hold such values (its size checks are NOT VALID).
	_, err = pool.Exec(ctx, `ALTER DOMAIN tenure.job_metadata DROP CONSTRAINT jobs_metadata_size;
		ALTER DOMAIN tenure.job_output DROP CONSTRAINT jobs_output_size`)
	require.NoError(t, err)
	hostileText := strings.Repeat(`"<script>alert(1)</script>'&+`, 70) // 2,030 bytes, escapes to ~5x
	var all int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs
		(queue, kind, payload, state, attempts, max_attempts, generation, last_error_code, finished_at, attempted_at,
		 errors, metadata, output)
		VALUES (repeat('"', 128), repeat('<', 128), jsonb_build_object('s', repeat('"<', 100000)), 'dead', 1, 1, 1, 'TIMEOUT', now(), now(),
		        (SELECT jsonb_agg(jsonb_build_object('attempt', g, 'generation', g, 'code', repeat('"', 500), 'message', $1::text, 'at', now()))
		         FROM generate_series(1, 5000) g),
		        (SELECT jsonb_object_agg(repeat('"', 26) || g, repeat('<', 130)) FROM generate_series(1, 40) g),
		        jsonb_build_object('o', repeat('"', 30000)))
		RETURNING id`, hostileText).Scan(&all))
	_, err = pool.Exec(ctx, `INSERT INTO tenure.effects (key, job_id, name, generation, result)
		SELECT repeat('"', 5000) || g, $1::bigint, repeat('<', 190) || g, 1, jsonb_build_object('r', repeat('"', 10000))
		FROM generate_series(1, 300) g`, all)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.audit (actor, action, reason, job_id, detail)
		SELECT repeat('"', 200), 'retry', left($2::text, 2000), $1::bigint, jsonb_build_object('d', repeat('"', 20000))
		FROM generate_series(1, 300) g`, all, hostileText)
	require.NoError(t, err)
	checkJob("every-column", all)
	for _, f := range []struct{ field, column string }{{"args", "payload"}, {"output", "output"}, {"errors", "errors"}, {"metadata", "metadata"}} {
		checkRaw("every-column", all, f.field, f.column)
	}

	// More jobs than a page, each with ~1 MB of args and the longest queue and kind names of
	// the most escaped characters; searches that match them all, none, and a text only past
	// each args' searched head.
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, max_attempts, finished_at, attempted_at, last_error_code)
		SELECT CASE WHEN g % 2 = 0 THEN 'wide' ELSE repeat('"', 128) END, repeat('<', 128),
		       jsonb_build_object('s', repeat('<"''&>+', 150000) || 'needle-at-the-end'), 'dead', 1, 1, now(), now(), 'TIMEOUT'
		FROM generate_series(1, $1::int + 10) g`, tenureui.DefaultPageSize)
	require.NoError(t, err)
	for _, p := range []string{"/ui/jobs", "/ui/jobs?state=dead", "/ui/jobs?state=succeeded", "/ui/jobs?queue=wide",
		"/ui/jobs?q=%3C", "/ui/jobs?state=dead&q=%3C", "/ui/jobs?q=nothing-matches", "/ui/jobs?q=needle-at-the-end",
		"/ui/jobs?kind=" + strings.Repeat("k", 5000), "/ui/jobs?state=bogus" + strings.Repeat("%22", 5000),
		"/ui/jobs?state=dead&queue=" + strings.Repeat("%22", 128) + "&kind=" + strings.Repeat("%3C", 128) + "&q=" + strings.Repeat("%22", 200),
		"/ui/"} {
		m := getMeasured(t, base, p)
		t.Logf("%-28s GET %-40.40s %8d bytes, %10d allocated", "list", p, len(m.body), m.alloc)
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest}, m.code, "%s: %.300s", p, m.body)
		require.LessOrEqual(t, len(m.body), listBudget, "%s: page over its budget", p)
		require.LessOrEqual(t, m.alloc, uint64(maxRequestAlloc), "%s: request allocated over its budget", p)
		require.NotContains(t, m.body, "<script>alert", "%s: markup shown unescaped", p)
		if strings.Contains(p, "q=%3C") {
			require.Len(t, listedIDs(m.body), tenureui.DefaultPageSize, "%s: a full page of matches", p)
		}
	}
	// The search reads the first SearchChars characters of each args: a text past them is
	// not found (docs/guide.md says so).
	m = getMeasured(t, base, "/ui/jobs?queue=wide&q=needle-at-the-end")
	require.Equal(t, http.StatusOK, m.code)
	require.Empty(t, listedIDs(m.body))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestDashboardStatementsHaveATimeout: the list and job statements run under
// Config.QueryTimeout; a search that would serialize many large args runs out of it and the
// page answers 503 saying so, while the same page with a generous timeout answers. (Not the
// default 5 s: on a machine loaded past 30 runnable threads the search itself took longer.)
func TestDashboardStatementsHaveATimeout(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(context.Background(), `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, max_attempts, finished_at, attempted_at, last_error_code)
		SELECT 'q', 'k', jsonb_build_object('s', repeat('abcdefgh', 25000)), 'dead', 1, 1, now(), now(), 'TIMEOUT'
		FROM generate_series(1, 400) g`)
	require.NoError(t, err)
	for _, c := range []struct {
		timeout time.Duration
		code    int
	}{{time.Millisecond, http.StatusServiceUnavailable}, {2 * time.Minute, http.StatusOK}} {
		h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui", QueryTimeout: c.timeout})
		require.NoError(t, err)
		code, body, _ := newClient(t, uiServer(t, h)).get("/ui/jobs?q=nothing-matches")
		require.Equal(t, c.code, code, "%v: %.300s", c.timeout, body)
		if code == http.StatusServiceUnavailable {
			require.Contains(t, body, "Config.QueryTimeout")
		}
	}
}

// TestJobPageShowsValues: within the budgets the job page still shows an ordinary job whole:
// args indented as before, output, metadata as a table, the newest 10 entries of the error
// history (and how many older ones were left out), effects and audit; nothing is marked cut,
// and the raw download returns the stored args.
func TestJobPageShowsValues(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs
		(queue, kind, payload, state, attempts, max_attempts, generation, last_error_code, finished_at, attempted_at, errors, metadata, output)
		VALUES ('mail', 'welcome', '{"to":"a@example.com","items":[1,2]}', 'dead', 12, 12, 12, 'TIMEOUT', now(), now(),
		        (SELECT jsonb_agg(jsonb_build_object('attempt', g, 'generation', g, 'code', 'TIMEOUT', 'message', 'boom ' || g,
		                 'at', '2026-01-01T00:00:00Z')) FROM generate_series(1, 12) g),
		        '{"trace":"req-7f3a"}', '{"sent":true}')
		RETURNING id`).Scan(&id))
	_, err := pool.Exec(ctx, `INSERT INTO tenure.effects (key, job_id, name, generation, result)
		VALUES ('job:' || $1::bigint || ':effect:send', $1::bigint, 'send', 3, '{"msg_id":"m-1"}')`, id)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.audit (actor, action, reason, job_id, detail) VALUES ('ada', 'retry', 'upstream fixed', $1, '{}'),
		('bob', 'retry', repeat('r', 2000), $1, jsonb_build_object('d', repeat('x', 1000)))`, id)
	require.NoError(t, err)
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui"})
	require.NoError(t, err)
	b := newClient(t, uiServer(t, h))
	code, body, _ := b.get(fmt.Sprintf("/ui/jobs/%d", id))
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		"{\n  &#34;to&#34;: &#34;a@example.com&#34;,\n  &#34;items&#34;: [\n    1,\n    2\n  ]\n}", // as jsonb stores it
		"&#34;sent&#34;: true", "<th>trace</th><td>req-7f3a</td>", "boom 12", "boom 3", "2 older entries not shown",
		"2026-01-01 00:00:00Z", "m-1", "upstream fixed",
		strings.Repeat("r", 500) + "…", "xxxx…", // long texts cut, and marked so
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "boom 2<", "the oldest entries are left out")
	require.NotContains(t, body, "Only the beginning is shown")
	code, raw, hdr := b.get(fmt.Sprintf("/ui/jobs/%d/raw/args", id))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	require.JSONEq(t, `{"to":"a@example.com","items":[1,2]}`, raw)
	code, _, _ = b.get(fmt.Sprintf("/ui/jobs/%d/raw/nope", id))
	require.Equal(t, http.StatusNotFound, code)
	code, _, _ = b.get("/ui/jobs/999999/raw/args")
	require.Equal(t, http.StatusNotFound, code)
}
