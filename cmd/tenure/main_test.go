package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type result struct {
	code           int
	stdout, stderr string
}

// tenure runs the CLI in-process with the given $DATABASE_URL (stdin: not a terminal).
func tenure(t *testing.T, databaseURL string, args ...string) result {
	t.Helper()
	return tenureIn(t, databaseURL, nil, args...)
}

// tenureIn is tenure with stdin on a terminal that reads typed (nil: no terminal).
func tenureIn(t *testing.T, databaseURL string, typed *string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, getenv: func(k string) string {
		if k == "DATABASE_URL" {
			return databaseURL
		}
		return ""
	}}
	if typed != nil {
		e.stdin = strings.NewReader(*typed)
		e.stdinTerminal = func() bool { return true }
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, e, args)
	return result{code, out.String(), errOut.String()}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{nil, exitUsage, "", "Usage: tenure <command>"},
		{[]string{"help"}, exitOK, "migrate", ""},
		{[]string{"-h"}, exitOK, "Usage: tenure <command>", ""},
		{[]string{"help", "migrate"}, exitOK, "Usage: tenure migrate", ""},
		{[]string{"migrate", "-h"}, exitOK, "-steps", ""},
		{[]string{"nope"}, exitUsage, "", `unknown command "nope"`},
		{[]string{"migrate"}, exitUsage, "", "missing action"},
		{[]string{"migrate", "sideways"}, exitUsage, "", `unknown action "sideways"`},
		{[]string{"migrate", "up", "extra"}, exitUsage, "", "unexpected arguments"},
		{[]string{"migrate", "up", "-steps", "2"}, exitUsage, "", "-steps only applies to down"},
		{[]string{"migrate", "status", "-yes"}, exitUsage, "", "-yes only applies to down"},
		{[]string{"migrate", "down", "-steps", "0"}, exitUsage, "", "at least 1"},
		{[]string{"migrate", "down", "-steps", "x"}, exitUsage, "", "invalid value"},
		{[]string{"migrate", "-bogus", "up"}, exitUsage, "", "flag provided but not defined"},
		{[]string{"migrate", "status"}, exitUsage, "", "pass -database-url or set DATABASE_URL"},
		{[]string{"migrate", "status", "-database-url", "::not a url"}, exitUsage, "", "invalid database URL"},
	} {
		r := tenure(t, "", c.args...)
		assert.Equal(t, c.code, r.code, "%v: stderr=%s", c.args, r.stderr)
		assert.Contains(t, r.stdout, c.inStdout, "%v", c.args)
		assert.Contains(t, r.stderr, c.inStderr, "%v", c.args)
	}
}

func TestMigrateCycle(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)
	latest := migrations.Latest()
	all := migrations.All()

	r := tenure(t, "", "migrate", "status", "-database-url", db)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "VERSION")
	assert.Equal(t, len(all), strings.Count(r.stdout, "pending"))

	// $DATABASE_URL, flags before the action.
	r = tenure(t, db, "migrate", "up")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, m := range all {
		assert.Contains(t, r.stdout, "applied  "+padded(m.Version)+"_"+m.Name)
	}
	r = tenure(t, db, "migrate", "up")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "up to date")

	r = tenure(t, "", "migrate", "-database-url", db, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, len(all), strings.Count(r.stdout, "applied"))

	r = tenure(t, db, "migrate", "down", "-steps", "1000", "-yes")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, len(all), strings.Count(r.stdout, "reverted"))
	r = tenure(t, db, "migrate", "down")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing to roll back", "nothing to confirm either")

	r = tenure(t, db, "migrate", "up")
	require.Equal(t, exitOK, r.code, r.stderr)

	// A database migrated by a newer binary: up and down refuse, status warns.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO tenure.schema_migrations (version, name) VALUES ($1, 'future')", latest+1)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	for _, action := range []string{"up", "down"} {
		r = tenure(t, db, "migrate", action)
		assert.Equal(t, exitFail, r.code, action)
		assert.Contains(t, r.stderr, "newer than this binary", action)
	}
	r = tenure(t, db, "migrate", "status")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "UNKNOWN")
	assert.Contains(t, r.stderr, "warning")
}

// TestMigrateDownAsks: migrate down says exactly which migrations it reverts and which tables
// that drops, and reverts nothing without "yes" typed on a terminal or -yes; without a
// terminal it refuses.
func TestMigrateDownAsks(t *testing.T) {
	t.Parallel()
	db := pgtest.NewMigratedDB(t)
	all := migrations.All()
	applied := func() int {
		r := tenure(t, db, "migrate", "status")
		require.Equal(t, exitOK, r.code, r.stderr)
		return strings.Count(r.stdout, "applied")
	}
	str := func(s string) *string { return &s }

	r := tenure(t, db, "migrate", "down", "-steps", "1000000")
	require.Equal(t, exitUsage, r.code, r.stdout)
	require.Contains(t, r.stderr, "stdin is not a terminal; pass -yes")
	require.NotContains(t, r.stdout, "reverted ")
	require.Equal(t, len(all), applied(), "nothing reverted")

	for _, answer := range []string{"no\n", "", "y\n", "YES please\n"} {
		r = tenureIn(t, db, str(answer), "migrate", "down", "-steps", "1000000")
		require.Equal(t, exitFail, r.code, "%q: %s", answer, r.stdout)
		require.Contains(t, r.stderr, "Type yes")
		require.Contains(t, r.stderr, "nothing reverted")
		require.Equal(t, len(all), applied(), "nothing reverted after %q", answer)
	}
	// What it would do was said before the question.
	require.Contains(t, r.stdout, fmt.Sprintf("-steps 1000000, but only %d migration(s) are applied", len(all)))
	for _, m := range all {
		require.Contains(t, r.stdout, "  "+padded(m.Version)+"_"+m.Name+"\n")
	}
	require.Regexp(t, `drops these tables and every row in them: .*tenure\.jobs`, r.stdout)

	// -steps 1 names only the newest one.
	last := all[len(all)-1]
	r = tenureIn(t, db, str("yes\n"), "migrate", "down")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "This reverts 1 migration(s), newest first:\n  "+padded(last.Version)+"_"+last.Name+"\n")
	require.Contains(t, r.stdout, "reverted "+padded(last.Version)+"_"+last.Name)
	require.Equal(t, len(all)-1, applied())

	r = tenure(t, db, "migrate", "down", "-steps", "2", "-yes")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, "reverted "))
	require.Equal(t, len(all)-3, applied())
}

func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	r := tenure(t, "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "migrate", "status")
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, "connecting")
}

// TestBinary builds the command and runs it as a process, for main's exit codes.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "tenure")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	db := pgtest.NewEmptyDB(t)
	cmd := exec.Command(bin, "migrate", "up")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "applied")

	cmd = exec.Command(bin, "migrate", "sideways")
	out, err = cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, string(out))
	assert.Equal(t, exitUsage, exitErr.ExitCode())
}

func padded(v int) string { return fmt.Sprintf("%04d", v) }
