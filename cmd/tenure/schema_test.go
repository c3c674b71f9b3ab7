package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	neturl "net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/pgtest"
)

// tenureEnv runs the CLI in-process with the given environment.
func tenureEnv(t *testing.T, vars map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, e, args)
	return result{code, out.String(), errOut.String()}
}

// TestSchemaFlag: -schema and $TENURE_SCHEMA choose the schema of every database command;
// the default schema is untouched; a bad name is a usage error.
func TestSchemaFlag(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)
	all := len(migrations.All())
	vars := map[string]string{"DATABASE_URL": db}
	app2 := map[string]string{"DATABASE_URL": db, "TENURE_SCHEMA": "app2"}

	r := tenureEnv(t, vars, "migrate", "up", "-schema", "app2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, all, strings.Count(r.stdout, "applied "))
	r = tenureEnv(t, app2, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, all, strings.Count(r.stdout, "applied"))
	r = tenureEnv(t, vars, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, all, strings.Count(r.stdout, "pending"), "schema tenure is not migrated")

	conn, err := pgx.Connect(context.Background(), db)
	require.NoError(t, err)
	var id int64
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT id FROM app2.enqueue('cli_probe', '{}'::jsonb, queue => 'mail')`).Scan(&id))
	require.NoError(t, conn.Close(context.Background()))

	r = tenureEnv(t, app2, "jobs", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "cli_probe")
	r = tenureEnv(t, vars, "jobs", "list", "-schema", "app2", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "cli_probe")
	r = tenureEnv(t, app2, "queue", "pause", "mail", "-actor", "test", "-reason", "schema flag")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = tenureEnv(t, vars, "jobs", "list")
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, "not migrated")

	for _, bad := range []string{"App2", "1x", "public", "select"} {
		r = tenureEnv(t, vars, "jobs", "list", "-schema", bad)
		assert.Equal(t, exitUsage, r.code, bad)
		assert.Contains(t, r.stderr, "invalid schema name", bad)
		r = tenureEnv(t, map[string]string{"DATABASE_URL": db, "TENURE_SCHEMA": bad}, "migrate", "up")
		assert.Equal(t, exitUsage, r.code, bad)
	}
	for _, bad := range []string{"App2", "select"} {
		r = tenureEnv(t, vars, "serve", "-addr", "127.0.0.1:0", "-schema", bad)
		assert.Equal(t, exitUsage, r.code, bad)
		assert.Contains(t, r.stderr, "invalid schema name", bad)
	}
}

// TestServeInAnotherSchema: `tenure serve -schema S -ui` in a database where Tenure lives in
// schema S only (no schema "tenure") serves S's cluster metrics, the dashboard's pages and a
// job's page, and the dashboard's actions are audited in S.
func TestServeInAnotherSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)
	vars := map[string]string{"DATABASE_URL": db, "TENURE_UI_PASSWORD": "s3cret"}
	r := tenureEnv(t, vars, "migrate", "up", "-schema", "srv_jobs")
	require.Equal(t, exitOK, r.code, r.stderr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, db)
	require.NoError(t, err)
	defer pool.Close()
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM srv_jobs.enqueue('welcome', '{"to":"ada@example.com"}'::jsonb, queue => 'mail')`).Scan(&id))
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'tenure')`).Scan(&exists))
	require.False(t, exists, "the database has no schema tenure")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"serve", "-schema", "srv_jobs", "-addr", addr, "-ui", "-ui-actions", "-ui-user", "ops"})
	}()
	base := "http://" + addr
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}
	do := func(method, path string, form neturl.Values) (int, string) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequest(method, base+path, body)
		require.NoError(t, err)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.SetBasicAuth("ops", "s3cret")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var metrics string
	require.Eventually(t, func() bool {
		code, body := do(http.MethodGet, "/metrics", nil)
		metrics = body
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "serve never answered: %s", errOut.String())
	require.Regexp(t, `tenure_queue_jobs\{kind="welcome",priority="\d",queue="mail",state="ready"\} 1\n`, metrics)
	code, body := do(http.MethodGet, "/ui/", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-band="mail/`)
	code, body = do(http.MethodGet, fmt.Sprintf("/ui/jobs/%d", id), nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "ada@example.com")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF field: %s", body)
	code, body = do(http.MethodPost, "/ui/queues/mail/pause", neturl.Values{"csrf": {m[1]}, "reason": {"schema serve"}})
	require.Equal(t, http.StatusOK, code, body)
	var actor string
	require.NoError(t, pool.QueryRow(ctx, `SELECT actor FROM srv_jobs.audit WHERE action = 'pause'`).Scan(&actor))
	require.Equal(t, "ops", actor)
	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}
