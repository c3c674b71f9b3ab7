package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	r = tenureEnv(t, app2, "serve", "-addr", "127.0.0.1:0")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "schema tenure only")
}
