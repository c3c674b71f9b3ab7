package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
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
