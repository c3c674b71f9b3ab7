package main

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/pgtest"
)

// TestCommandsOnUnmigratedDatabase: every command that reads or writes Tenure's tables, run on
// a database that was never migrated, fails with the one hint (migrations.Hint), not with the
// database's `relation "tenure.jobs" does not exist`.
func TestCommandsOnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyDB(t)
	act := []string{"-actor", "ops", "-reason", "r"}
	for _, args := range [][]string{
		{"jobs", "list"},
		{"jobs", "list", "-json"},
		{"jobs", "list", "-tag", "vip"},
		{"jobs", "get", "1"},
		{"jobs", "get", "1", "-json"},
		{"jobs", "stats"},
		{"jobs", "stats", "-json"},
		{"jobs", "audit"},
		{"jobs", "audit", "1"},
		append([]string{"jobs", "cancel", "1"}, act...),
		append([]string{"jobs", "retry", "1"}, act...),
		append([]string{"jobs", "reinject", "1"}, act...),
		append([]string{"jobs", "delete", "1"}, act...),
		{"queue", "list"},
		append([]string{"queue", "pause", "mail"}, act...),
		append([]string{"queue", "resume", "mail"}, act...),
		append([]string{"queue", "pause", "mail", "-force"}, act...),
		{"periodic", "list"},
		{"workers"},
	} {
		r := tenure(t, url, args...)
		require.Equal(t, exitFail, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, migrations.Hint, "%v", args)
		require.NotContains(t, r.stderr, "does not exist", "%v: the raw database error, not the hint", args)
	}
	// migrate status works (it is how one finds out), and says what is pending.
	r := tenure(t, url, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "pending")
}

// TestServeRefusesUnmigratedDatabase: tenure serve checks the schema before it listens, and
// refuses an unmigrated database with the hint instead of answering every scrape with 500.
func TestServeRefusesUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyDB(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, extra := range [][]string{nil, {"-ui"}} {
		var out, errOut bytes.Buffer
		e := &env{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
		done := make(chan int, 1)
		go func() { done <- run(ctx, e, append([]string{"serve", "-database-url", url, "-addr", addr}, extra...)) }()
		select {
		case code := <-done:
			require.Equal(t, exitFail, code, errOut.String())
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatalf("serve %v started on an unmigrated database: %s", extra, out.String())
		}
		require.Contains(t, errOut.String(), migrations.Hint)
		require.NotContains(t, out.String(), "serving")
	}
}
