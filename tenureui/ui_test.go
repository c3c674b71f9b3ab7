package tenureui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureui"
)

// uiServer serves h under /ui on a real HTTP server.
func uiServer(t *testing.T, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/ui/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

type browserless struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newClient(t *testing.T, base string) *browserless {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browserless{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browserless) get(path string) (int, string, http.Header) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp.StatusCode, string(body), resp.Header
}

// post submits a form the way the browser does (same origin).
func (b *browserless) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := b.c.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp.StatusCode, string(body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF field in the page")
	return m[1]
}

var rowRE = regexp.MustCompile(`<tr data-id="(\d+)">`)

func listedIDs(body string) []string {
	var out []string
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// insertDead inserts a dead job straight into the table (as a worker would leave it).
func insertDead(t *testing.T, pool *pgxpool.Pool, queue, kind, payload string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO tenure.jobs
		(queue, kind, payload, state, attempts, max_attempts, generation, last_error_code, finished_at, attempted_at, errors)
		VALUES ($1, $2, $3, 'dead', 1, 1, 1, 'PERMANENT_REMOTE_ERROR', now(), now(),
		        '[{"attempt":1,"generation":1,"code":"PERMANENT_REMOTE_ERROR","message":"boom","at":"2026-01-01T00:00:00Z"}]')
		RETURNING id`, queue, kind, payload).Scan(&id))
	return id
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := tenureui.New(nil, nil)
	require.ErrorIs(t, err, tenureui.ErrNilPool)
	pool := pgtest.NewPool(t)
	_, err = tenureui.New(pool, &tenureui.Config{EnableActions: true})
	require.ErrorIs(t, err, tenureui.ErrNoAuthorizer)
	for _, c := range []tenureui.Config{{PageSize: 501}, {ScanWindow: -1}, {RefreshEvery: time.Millisecond},
		{MaxBulk: 10001}, {CSRFKey: []byte("short")}, {Prefix: "admin"}, {QueryTimeout: time.Hour}, {QueryTimeout: -time.Second},
		{MaxRawBytes: 10}, {MaxRawBytes: 2 << 30}} {
		_, err = tenureui.New(pool, &c)
		require.ErrorIs(t, err, tenureui.ErrInvalidConfig, "%+v", c)
	}
}

// TestReadOnlyByDefault: without EnableActions the pages render (with the security headers)
// and every POST is refused, changing nothing.
func TestReadOnlyByDefault(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	id := insertDead(t, pool, "mail", "welcome", `{"to":"a@example.com"}`)
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui"})
	require.NoError(t, err)
	b := newClient(t, uiServer(t, h))

	code, _, hdr := b.get("/ui")
	require.True(t, code == http.StatusFound || code == http.StatusTemporaryRedirect, "%d", code)
	require.Equal(t, "/ui/", hdr.Get("Location"))
	for _, p := range []string{"/ui/", "/ui/jobs", "/ui/jobs?state=dead", fmt.Sprintf("/ui/jobs/%d", id), "/ui/?partial=1"} {
		code, body, hdr := b.get(p)
		require.Equal(t, http.StatusOK, code, p)
		require.Contains(t, hdr.Get("Content-Security-Policy"), "script-src 'self'", p)
		require.NotContains(t, hdr.Get("Content-Security-Policy"), "unsafe-inline", p)
		require.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"))
		require.NotContains(t, body, `name="csrf"`, "a read-only page offers no form: %s", p)
		if !strings.Contains(p, "partial") {
			require.Contains(t, body, "read-only")
		}
	}
	code, _, _ = b.get("/ui/static/ui.js")
	require.Equal(t, http.StatusOK, code)
	code, body := b.post(fmt.Sprintf("/ui/jobs/%d/reinject", id), url.Values{"reason": {"x"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "read-only")
	j, err := mustClient(t, pool).Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateDead, j.State)
	code, _, _ = b.get("/ui/jobs/999999")
	require.Equal(t, http.StatusNotFound, code)
	code, body, _ = b.get("/ui/jobs?state=bogus&priority=12")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `unknown state &#34;bogus&#34;`)
}

// TestActionsAreAuthorizedAndAudited: a POST needs the CSRF token, a reason and the
// authorizer's consent; a refused one changes nothing; an accepted one goes through the
// operator API with the authorizer's actor and the reason in the audit table.
func TestActionsAreAuthorizedAndAudited(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	client := mustClient(t, pool)
	id := insertDead(t, pool, "mail", "welcome", `{"to":"a@example.com"}`)
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui", EnableActions: true,
		Authorizer: func(r *http.Request, a tenureui.Action) (string, error) {
			if r.Header.Get("X-User") == "" {
				return "", errors.New("who are you?")
			}
			return r.Header.Get("X-User") + ":" + string(a), nil
		}})
	require.NoError(t, err)
	base := uiServer(t, h)
	b := newClient(t, base)
	path := fmt.Sprintf("/ui/jobs/%d/reinject", id)

	code, body, _ := b.get(fmt.Sprintf("/ui/jobs/%d", id))
	require.Equal(t, http.StatusOK, code)
	tok := csrfOf(t, body)

	// No token; a wrong token; a cross-site request with the right token.
	code, body = b.post(path, url.Values{"reason": {"r"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "CSRF")
	code, _ = b.post(path, url.Values{"reason": {"r"}, "csrf": {tok + "x"}})
	require.Equal(t, http.StatusForbidden, code)
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(url.Values{"reason": {"r"}, "csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("X-User", "mallory")
	resp, err := b.c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	// A token without the authorizer's consent; a missing reason.
	code, body = b.post(path, url.Values{"reason": {"r"}, "csrf": {tok}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "who are you?")
	audit, err := client.Audit(ctx, id, 0, 10)
	require.NoError(t, err)
	require.Empty(t, audit, "a refused action is not audited and changes nothing")
	j, err := client.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateDead, j.State)

	// Accepted.
	do := func(path string, form url.Values) (int, string) {
		form.Set("csrf", tok)
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-User", "ada")
		resp, err := b.c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body = do(path, url.Values{"reason": {"  "}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "reason is required")
	code, body = do(path, url.Values{"reason": {"upstream fixed"}})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, fmt.Sprintf("Job %d re-injected", id))
	j, err = client.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, j.State)
	audit, err = client.Audit(ctx, id, 0, 10)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "ada:reinject", audit[0].Actor)
	require.Equal(t, "upstream fixed", audit[0].Reason)
	// The same action again: the API's state error, shown as a conflict.
	code, body = do(path, url.Values{"reason": {"again"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "not dead")

	// Bulk: re-inject the dead jobs of kind "bulk" (and only them), bounded by MaxBulk.
	var bulk []int64
	for i := range 3 {
		bulk = append(bulk, insertDead(t, pool, "mail", "bulk", fmt.Sprintf(`{"n":%d}`, i)))
	}
	other := insertDead(t, pool, "mail", "other", `{}`)
	code, body = do("/ui/bulk", url.Values{"reason": {"bulk fix"}, "action": {"bulk-reinject"}, "state": {"ready"}, "kind": {"bulk"}})
	require.Equal(t, http.StatusBadRequest, code, body)
	code, body = do("/ui/bulk", url.Values{"reason": {"bulk fix"}, "action": {"bulk-reinject"}, "state": {"dead"}, "kind": {"bulk"}})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "re-injected 3 of 3 matching jobs")
	for _, id := range bulk {
		j, err := client.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, generics.JobStateReady, j.State)
		a, err := client.Audit(ctx, id, 0, 10)
		require.NoError(t, err)
		require.Len(t, a, 1)
		require.Equal(t, "ada:bulk-reinject", a[0].Actor)
	}
	j, err = client.Get(ctx, other)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateDead, j.State, "a job outside the filter is untouched")

	// Pause and resume a queue.
	code, body = do("/ui/queues/mail/pause", url.Values{"reason": {"maintenance"}})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Queue mail: paused (by ada:pause)")
	qs, err := client.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.True(t, qs[0].Paused)
	require.Equal(t, "maintenance", qs[0].Reason)
	_, body, _ = b.get("/ui/")
	require.Contains(t, body, `<span class="badge paused">paused</span>`)
	code, _ = do("/ui/queues/mail/resume", url.Values{"reason": {"done"}})
	require.Equal(t, http.StatusOK, code)

	// Delete, then the job page is gone.
	code, body = do(fmt.Sprintf("/ui/jobs/%d/delete", other), url.Values{"reason": {"junk"}})
	require.Equal(t, http.StatusOK, code, body)
	_, err = client.Get(ctx, other)
	require.ErrorIs(t, err, jobs.ErrNotFound)
}

// TestJobsListFiltersAndPages checks each filter of the list and that window paging finds
// every match exactly once when the matches are spread over more ids than one view reads.
func TestJobsListFiltersAndPages(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	// 300 succeeded jobs; every 50th is kind "rare" in queue "q2", priority 5, with a marker.
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, priority, state, finished_at, attempts, created_at)
		SELECT CASE WHEN g % 50 = 0 THEN 'q2' ELSE 'q1' END,
		       CASE WHEN g % 50 = 0 THEN 'rare' ELSE 'common' END,
		       jsonb_build_object('n', g, 'note', CASE WHEN g % 50 = 0 THEN 'Needle' ELSE 'hay' END),
		       CASE WHEN g % 50 = 0 THEN 5 ELSE 2 END, 'succeeded', now(), 1,
		       CASE WHEN g <= 150 THEN '2026-01-01T00:00:00Z'::timestamptz ELSE '2026-06-01T00:00:00Z'::timestamptz END
		FROM generate_series(1, 300) g`)
	require.NoError(t, err)
	// Every 30th job carries the tag "vip" (with another tag), so 10 of them.
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET tags = ARRAY['vip', 'batch-7'] WHERE id % 30 = 0`)
	require.NoError(t, err)
	dead := insertDead(t, pool, "q1", "common", `{"n":-1}`)
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui", PageSize: 4, ScanWindow: 40, ScanWindows: 2})
	require.NoError(t, err)
	b := newClient(t, uiServer(t, h))

	count := func(query string) []string {
		t.Helper()
		var all []string
		next := "/ui/jobs?" + query
		for range 200 {
			code, body, _ := b.get(next)
			require.Equal(t, http.StatusOK, code, next)
			all = append(all, listedIDs(body)...)
			m := regexp.MustCompile(`id="older" href="([^"]+)"`).FindStringSubmatch(body)
			if m == nil {
				return all
			}
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
		t.Fatalf("paging %q did not end", query)
		return nil
	}
	require.Len(t, count(""), 301)
	require.Equal(t, []string{fmt.Sprint(dead)}, count("state=dead"))
	rare := count("kind=rare")
	require.Len(t, rare, 6)
	require.Equal(t, rare, count("queue=q2"))
	require.Equal(t, rare, count("priority=5"))
	require.Equal(t, rare, count("q=needle"), "search is case-insensitive on the args")
	require.Equal(t, rare, count("state=succeeded&kind=rare"))
	require.Len(t, count("kind=rare&from=2026-03-01T00:00"), 3)
	require.Len(t, count("kind=rare&to=2026-03-01T00:00"), 3)
	require.Empty(t, count("kind=nope"))
	require.Len(t, count("tag=vip"), 10)
	require.Len(t, count("tag=vip&kind=rare"), 2, "ids 150 and 300 are both rare and tagged")
	require.Empty(t, count("tag=nope"))
	code, _, _ := b.get("/ui/jobs?tag=" + url.QueryEscape("bad tag!"))
	require.Equal(t, http.StatusBadRequest, code)
	// One sparse view reads at most 2 windows of 40 ids and says so.
	_, body, _ := b.get("/ui/jobs?kind=rare")
	require.Contains(t, body, "Older jobs were not searched yet")
	require.Contains(t, body, "searched ids 222..301")
}

func mustClient(t *testing.T, pool *pgxpool.Pool) *jobs.Client {
	t.Helper()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	return c
}

// TestOverviewSnapshotIsShared: within RefreshEvery every viewer (and every poll) gets the
// same snapshot, so the overview's database cost does not grow with the open pages; after
// it, a new one is computed and shows new jobs.
func TestOverviewSnapshotIsShared(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui", RefreshEvery: 3 * time.Second})
	require.NoError(t, err)
	base := uiServer(t, h)
	snapRE := regexp.MustCompile(`Snapshot [^<]+`)
	view := func() (string, string) {
		_, body, _ := newClient(t, base).get("/ui/?partial=1") // a new viewer each time
		return snapRE.FindString(body), body
	}
	first, _ := view()
	require.NotEmpty(t, first)
	insertDead(t, pool, "late", "k", `{}`)
	for range 5 {
		again, body := view()
		require.Equal(t, first, again)
		require.NotContains(t, body, `data-band="late/2"`)
	}
	time.Sleep(3100 * time.Millisecond)
	later, body := view()
	require.NotEqual(t, first, later)
	require.Contains(t, body, `data-band="late/2"`)
}

// TestOverviewShowsJobsNoLiveWorkerCanRun: the overview marks the bands of queues no live
// worker serves and lists, per queue and kind, the ready jobs no live worker can run.
func TestOverviewShowsJobsNoLiveWorkerCanRun(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO tenure.workers (id, host, pid, version, queues, started_at, heartbeat_at, expires_at)
		 VALUES ('w1', 'h', 1, 'v', '{"alpha": {"concurrency": 1}}', now(), now(), now() + interval '1 hour')`,
		`INSERT INTO tenure.kinds (kind, worker_id, queue, priority, max_attempts, lease_ms, timeout_ms)
		 VALUES ('mail', 'w1', 'alpha', 2, 25, 30000, 60000)`,
		`INSERT INTO tenure.jobs (queue, kind, payload) VALUES ('alpha', 'mail', '{}'), ('alpha', 'sms', '{}'), ('beta', 'mail', '{}')`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui"})
	require.NoError(t, err)
	_, body, _ := newClient(t, uiServer(t, h)).get("/ui/?partial=1")
	band := func(name string) string {
		i := strings.Index(body, `data-band="`+name+`"`)
		require.GreaterOrEqual(t, i, 0, "band %s", name)
		j := strings.Index(body[i:], "</tr>")
		return body[i : i+j]
	}
	require.NotContains(t, band("alpha/2"), "no worker")
	require.Contains(t, band("beta/2"), "no worker")
	require.Contains(t, body, `data-noworker="alpha/sms"`)
	require.Contains(t, body, `data-noworker="beta/mail"`)
	require.NotContains(t, body, `data-noworker="alpha/mail"`)
	require.Contains(t, body, "no live worker registers the kind")
	require.Contains(t, body, "no live worker serves the queue")
}

// TestOverviewShowsDeleteOnSuccessKinds: the overview names the kinds workers publish as
// deleting their succeeded jobs (tenure.kinds.delete_on_success), so a band whose finished
// count stays 0 has its reason on the page.
func TestOverviewShowsDeleteOnSuccessKinds(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.kinds (kind, worker_id, queue, priority, max_attempts, lease_ms, timeout_ms, delete_on_success)
		VALUES ('thumb', 'w1', 'media', 2, 25, 30000, 60000, true), ('mail', 'w1', 'alpha', 2, 25, 30000, 60000, false)`)
	require.NoError(t, err)
	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui"})
	require.NoError(t, err)
	_, body, _ := newClient(t, uiServer(t, h)).get("/ui/?partial=1")
	require.Contains(t, body, `id="delete-on-success"`)
	require.Contains(t, body, `data-delete-on-success="thumb"`)
	require.NotContains(t, body, `data-delete-on-success="mail"`)
}
