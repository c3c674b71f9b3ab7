package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	neturl "net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

func TestServeCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, run_at) VALUES ('mail', 'welcome', '{}', now() - interval '1 minute')`)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, []string{"serve", "-database-url", url, "-addr", addr}) }()

	var body []byte
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, string(body), `tenure_queue_jobs{kind="welcome",priority="2",queue="mail",state="ready"} 1`)
	require.Contains(t, string(body), `tenure_queue_oldest_ready_age_seconds{kind="welcome",priority="2",queue="mail"}`)
	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}

	r := tenure(t, url, "serve", "extra")
	require.Equal(t, exitUsage, r.code)
}

// TestServeUI: `tenure serve -ui` serves the dashboard next to /metrics, behind basic auth
// when -ui-user is set, with actions audited under that user.
func TestServeUI(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	for _, bad := range [][]string{
		{"serve", "-database-url", url, "-ui-actions"},
		{"serve", "-database-url", url, "-ui", "-ui-actions"},
		{"serve", "-database-url", url, "-ui", "-ui-user", "ops"}, // no $TENURE_UI_PASSWORD
	} {
		r := tenure(t, url, bad...)
		require.Equal(t, exitUsage, r.code, "%v: %s", bad, r.stderr)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, getenv: func(k string) string {
		if k == "TENURE_UI_PASSWORD" {
			return "s3cret"
		}
		return ""
	}}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"serve", "-database-url", url, "-addr", addr, "-ui", "-ui-actions", "-ui-user", "ops"})
	}()
	base := "http://" + addr
	get := func(path, user, pass string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	require.Eventually(t, func() bool { code, _ := get("/metrics", "", ""); return code == http.StatusOK }, 10*time.Second, 20*time.Millisecond)
	code, _ := get("/ui/", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("/ui/", "ops", "wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := get("/ui/", "ops", "s3cret")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "actions enabled")

	// An action: the CSRF cookie and field from a page, then a POST as ops, audited as ops.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}
	req, err := http.NewRequest(http.MethodGet, base+"/ui/jobs?state=dead", nil)
	require.NoError(t, err)
	req.SetBasicAuth("ops", "s3cret")
	resp, err := c.Do(req)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	require.NotNil(t, m, "no CSRF field: %s", page)
	form := neturl.Values{"csrf": {string(m[1])}, "reason": {"deploy freeze"}}
	req, err = http.NewRequest(http.MethodPost, base+"/ui/queues/mail/pause", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("ops", "s3cret")
	resp, err = c.Do(req)
	require.NoError(t, err)
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(page))
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	var actor, reason string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT actor, reason FROM tenure.audit WHERE action = 'pause'`).Scan(&actor, &reason))
	require.Equal(t, []string{"ops", "deploy freeze"}, []string{actor, reason})
	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.Contains(t, out.String(), "serving the dashboard on http://"+addr+"/ui/ (actions enabled for ops)")
}
