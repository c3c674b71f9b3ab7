package pgserver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDatabaseURL(t *testing.T) {
	for _, c := range []struct{ base, db, want string }{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "x_1", "postgres://postgres@127.0.0.1:5432/x_1?sslmode=disable"},
		{"postgresql://u:p%40ss@h/db", "other", "postgresql://u:p%40ss@h/other"},
		{"postgres://h:1", "d", "postgres://h:1/d"},
		{"host=h user=u dbname=old sslmode=disable", "new", "host=h user=u dbname=new sslmode=disable"},
		{"dbname='a b' host=h", "c", "dbname=c host=h"},
		{"host=h", "c d", "host=h dbname='c d'"},
	} {
		assert.Equal(t, c.want, DatabaseURL(c.base, c.db), c.base)
	}
}

func TestFindHonoursEnv(t *testing.T) {
	t.Setenv(EnvURL, "postgres://somewhere/admin")
	s, err := Find(context.Background(), t.Logf)
	require.NoError(t, err)
	assert.Equal(t, "postgres://somewhere/admin", s.URL)
	assert.False(t, s.Started)
	assert.NoError(t, s.Stop())

	t.Setenv(EnvURL, "")
	t.Setenv(EnvSkipDefault, "1")
	_, err = Find(context.Background(), t.Logf)
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestVersionedDirs(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "15", "13", "16"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, v, "bin"), 0o755))
	}
	got := versionedDirs(filepath.Join(root, "*", "bin"))
	want := []string{}
	for _, v := range []string{"16", "15", "13", "9.6"} {
		want = append(want, filepath.Join(root, v, "bin"))
	}
	assert.Equal(t, want, got)
}

// TestStartStop starts a throwaway cluster (the path taken when no server is reachable),
// uses it, and checks that Stop removes everything.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	if _, err := findBinaries(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, t.Logf)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	assert.True(t, s.Started)

	conn, err := pgx.Connect(ctx, s.URL)
	require.NoError(t, err)
	var fsync, user, enc string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_user, current_setting('server_encoding')").Scan(&fsync, &user, &enc))
	assert.Equal(t, "off", fsync)
	assert.Equal(t, "postgres", user)
	assert.Equal(t, "UTF8", enc)
	_, err = conn.Exec(ctx, "CREATE DATABASE started_ok")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	pidFile := filepath.Join(s.dataDir, "postmaster.pid")
	require.FileExists(t, pidFile)
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "Stop is idempotent")
	assert.NoDirExists(t, s.root)
	_, err = pgx.Connect(ctx, s.URL)
	assert.Error(t, err, "server still answering after Stop")
}

func TestReapStale(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	mk := func(name string, pid int) string {
		d := filepath.Join(tmp, dirPrefix+name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, ownerFile), []byte(strconv.Itoa(pid)), 0o644))
		return d
	}
	stale := mk("dead", dead.Process.Pid)
	alive := mk("alive", os.Getpid())
	reapStale(&binaries{pgCtl: "/nonexistent"}, nil, t.Logf)
	assert.NoDirExists(t, stale)
	assert.DirExists(t, alive)
}

// TestRestartHaltResume: a cluster started with extra settings keeps them across restarts;
// committed data survives a fast and an immediate (crash) restart; Halt/Resume stop and
// start it on the same port.
func TestRestartHaltResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	if _, err := findBinaries(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := StartWith(ctx, t.Logf, Options{Settings: []string{"synchronous_commit='on'"}})
	require.Error(t, err, "quotes are refused")
	s, err := StartWith(ctx, t.Logf, Options{Settings: []string{"synchronous_commit=on"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	require.NotEmpty(t, s.DataDir())
	require.True(t, s.Running(ctx))

	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, s.URL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	count := func() (n int, sc string) {
		conn, err := pgx.Connect(ctx, s.URL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*), current_setting('synchronous_commit') FROM t").Scan(&n, &sc))
		return n, sc
	}
	exec("CREATE TABLE t (x int)")
	exec("INSERT INTO t VALUES (1)")
	require.NoError(t, s.Restart(ctx, ModeFast))
	exec("INSERT INTO t VALUES (2)")
	require.NoError(t, s.Restart(ctx, ModeImmediate))
	n, sc := count()
	assert.Equal(t, 2, n, "committed rows survive a crash restart")
	assert.Equal(t, "on", sc, "settings survive restarts")

	require.NoError(t, s.Halt(ctx, ModeImmediate))
	assert.False(t, s.Running(ctx))
	_, err = pgx.Connect(ctx, s.URL)
	assert.Error(t, err)
	require.NoError(t, s.Resume(ctx))
	n, _ = count()
	assert.Equal(t, 2, n)
	assert.Error(t, s.Halt(ctx, "bogus"))
	assert.ErrorIs(t, (&Server{}).Restart(ctx, ModeFast), errNotStarted)
}
