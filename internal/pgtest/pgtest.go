// Package pgtest gives tests isolated PostgreSQL databases.
//
// Use Main in a package's TestMain so that a throwaway server can be started when none is
// reachable (see package pgserver for how the server is chosen) and stopped afterwards:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// NewPool returns a pool on a fresh database with every migration applied, cloned from a
// template database; NewEmptyDB returns the URL of a fresh database with nothing in it. Both
// drop their database when the test ends, and are safe to call from parallel tests.
//
// The template is named tenure_tpl_<hash> after a hash of the embedded migrations, so it is
// built once per server and migration content and reused by every test binary (several of
// which, run in parallel by go test ./..., may race to build it: building is serialized by an
// advisory lock on the admin database and done under a temporary name that is renamed only
// once complete). No connection is ever kept open to the template.
//
// Test databases are named tenure_t_<pid>_<random> (migrated) and tenure_e_<pid>_<random>
// (empty). Main drops, on a server of this host, those whose process is gone and that nobody
// is connected to: what a killed or timed-out test run left behind.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/locks"
	"github.com/tenureq/tenure/internal/pgserver"
)

// DefaultMaxConns is the MaxConns of the pools NewPool returns.
const DefaultMaxConns = 20

// templateLockKey is the advisory lock (on the admin database) serializing template builds.
const templateLockKey = int64(locks.Template)

var (
	mu        sync.Mutex
	server    *pgserver.Server
	serverErr error
	admin     *pgxpool.Pool

	tplOnce sync.Once
	tplName string
	tplErr  error
)

// Main is for TestMain: it finds or starts a PostgreSQL server (pgserver.Ensure), runs the
// tests, stops the server if it started one, and exits with the tests' code. When no server
// can be found or started it prints one line saying why and exits with code 1.
func Main(m *testing.M) {
	if !flag.Parsed() {
		flag.Parse()
	}
	var logs []string
	logf := func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) }
	srv, err := pgserver.Ensure(context.Background(), logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if !srv.Started {
		sweepLeftovers(srv.URL, logf)
	}
	if testing.Verbose() || srv.Started {
		for _, l := range logs {
			fmt.Fprintln(os.Stderr, l)
		}
	}
	mu.Lock()
	server = srv
	mu.Unlock()

	code := m.Run()

	mu.Lock()
	if admin != nil {
		admin.Close()
		admin = nil
	}
	mu.Unlock()
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	} else if srv.Started && testing.Verbose() {
		fmt.Fprintln(os.Stderr, "pgserver: stopped the throwaway server")
	}
	os.Exit(code)
}

// getServer returns the server set by Main or, without Main, one found by pgserver.Find
// (which never starts a cluster: without Main nobody would stop it).
func getServer() (*pgserver.Server, error) {
	mu.Lock()
	defer mu.Unlock()
	if server != nil || serverErr != nil {
		return server, serverErr
	}
	server, serverErr = pgserver.Find(context.Background(), nil)
	if serverErr != nil {
		serverErr = fmt.Errorf("pgtest: %w; call pgtest.Main(m) from TestMain so a throwaway server can be started", serverErr)
	}
	return server, serverErr
}

func mustServer(t testing.TB) *pgserver.Server {
	t.Helper()
	s, err := getServer()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// AdminURL returns the URL of the server's admin database (for CREATE/DROP DATABASE).
func AdminURL(t testing.TB) string {
	t.Helper()
	return mustServer(t).URL
}

// URLFor returns the URL of database dbname on the test server.
func URLFor(t testing.TB, dbname string) string {
	t.Helper()
	return pgserver.DatabaseURL(mustServer(t).URL, dbname)
}

func adminPool(ctx context.Context) (*pgxpool.Pool, error) {
	s, err := getServer()
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	if admin != nil {
		return admin, nil
	}
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		return nil, fmt.Errorf("pgtest: admin URL: %w", err)
	}
	cfg.MaxConns = 4
	cfg.MinConns = 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgtest: admin pool: %w", err)
	}
	admin = p
	return admin, nil
}

// NewPool returns a pool (MaxConns DefaultMaxConns) on a fresh database with every
// migration applied. The pool is closed and the database dropped when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPoolWith(t, nil)
}

// NewPoolWith is NewPool with configure, if not nil, applied to the pool's config before
// the pool is created (to change MaxConns, add an AfterConnect hook, and so on).
func NewPoolWith(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	u := NewMigratedDB(t)
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = DefaultMaxConns
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: opening pool: %v", err)
	}
	// Registered after the database's drop, so it runs before it.
	t.Cleanup(pool.Close)
	return pool
}

// NewMigratedDB creates a fresh database with every migration applied (a clone of the
// template) and returns its URL. The database is dropped (WITH (FORCE)) when the test ends.
func NewMigratedDB(t testing.TB) string {
	t.Helper()
	tpl, err := ensureTemplate()
	if err != nil {
		t.Fatal(err)
	}
	return newDatabase(t, "tenure_t_", tpl)
}

// NewEmptyDB creates a fresh empty database (no Tenure schema) and returns its URL. The
// database is dropped (WITH (FORCE)) when the test ends.
func NewEmptyDB(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "tenure_e_", "template0")
}

func newDatabase(t testing.TB, prefix, template string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := adminPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The pid lets a later run drop what a killed test process left (sweepLeftovers).
	name := fmt.Sprintf("%s%d_%s", prefix, os.Getpid(), randomHex(6))
	if err := createDatabase(ctx, pool, name, template); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, pool, name); err != nil {
			t.Errorf("pgtest: dropping %s: %v", name, err)
		}
	})
	return URLFor(t, name)
}

// createDatabase runs CREATE DATABASE name TEMPLATE template.
func createDatabase(ctx context.Context, pool *pgxpool.Pool, name, template string) error {
	err := execRetryInUse(ctx, pool, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", quoteIdent(name), quoteIdent(template)))
	if err != nil {
		return fmt.Errorf("creating database %s from %s: %w", name, template, err)
	}
	return nil
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// execRetryInUse runs sql, retrying while PostgreSQL reports that a database it needs is in
// use by another session (object_in_use): CREATE DATABASE refuses to copy a template with
// connections (an autovacuum worker, say), and ALTER DATABASE RENAME a database whose last
// session is still exiting.
func execRetryInUse(ctx context.Context, db execer, sql string) error {
	delay := 20 * time.Millisecond
	for {
		_, err := db.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		if delay < time.Second {
			delay *= 2
		}
	}
}

func dropDatabase(ctx context.Context, pool *pgxpool.Pool, name string) error {
	_, err := pool.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)")
	return err
}

// TemplateName returns the name of the template database for the embedded migrations.
func TemplateName() string { return "tenure_tpl_" + migrations.Hash()[:12] }

// ensureTemplate builds the template database once per process (and once per server and
// migration content across processes).
func ensureTemplate() (string, error) {
	tplOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		tplName, tplErr = buildTemplate(ctx)
		if tplErr != nil {
			tplErr = fmt.Errorf("pgtest: building template database: %w", tplErr)
		}
	})
	return tplName, tplErr
}

func buildTemplate(ctx context.Context) (string, error) {
	s, err := getServer()
	if err != nil {
		return "", err
	}
	name := TemplateName()
	// A dedicated connection: the advisory lock is session-level.
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	exists := func() (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok)
		return ok, err
	}
	if ok, err := exists(); err != nil || ok {
		return name, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", err
	}
	// Closing conn releases the lock.
	if ok, err := exists(); err != nil || ok {
		return name, err
	}

	// Builds happen only under the lock, so any build database left now is from a process
	// that died mid-build.
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'tenure\\_tplbuild\\_%'")
	if err != nil {
		return "", err
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	for _, d := range stale {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(d)+" WITH (FORCE)"); err != nil {
			return "", err
		}
	}

	build := "tenure_tplbuild_" + migrations.Hash()[:12] + "_" + randomHex(4)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+quoteIdent(build)+" TEMPLATE template0"); err != nil {
		return "", err
	}
	if err := migrateDB(ctx, pgserver.DatabaseURL(s.URL, build)); err != nil {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+quoteIdent(build)+" WITH (FORCE)")
		return "", err
	}
	if err := execRetryInUse(ctx, conn, "ALTER DATABASE "+quoteIdent(build)+" RENAME TO "+quoteIdent(name)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+quoteIdent(name)+" IS_TEMPLATE true"); err != nil {
		return "", err
	}
	return name, nil
}

func migrateDB(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = migrations.UpConn(ctx, c)
	return err
}

// sweepLeftovers drops test databases left by test processes that died before their
// cleanup ran (killed, timed out). It only looks at a server on this host, where the pid in a
// database's name can be checked, and only drops databases nobody is connected to.
func sweepLeftovers(adminURL string, logf func(string, ...any)) {
	cfg, err := pgconn.ParseConfig(adminURL)
	if err != nil || !(cfg.Host == "localhost" || cfg.Host == "::1" || strings.HasPrefix(cfg.Host, "127.") || strings.HasPrefix(cfg.Host, "/")) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
SELECT d.datname, substring(d.datname FROM '^tenure_[te]_([0-9]+)_')::int
FROM pg_database d
WHERE d.datname ~ '^tenure_[te]_[0-9]+_'
  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)`)
	if err != nil {
		return
	}
	type leftover struct {
		name string
		pid  int
	}
	var found []leftover
	var l leftover
	_, err = pgx.ForEachRow(rows, []any{&l.name, &l.pid}, func() error {
		found = append(found, l)
		return nil
	})
	if err != nil {
		logf("pgtest: looking for leftover databases: %v", err)
		return
	}
	for _, l := range found {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", l.pid)); err == nil {
			continue // owner alive
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(l.name)); err == nil {
			logf("pgtest: dropped leftover database %s (pid %d gone)", l.name, l.pid)
		}
	}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ExamplePool is NewPool for runnable Example functions, which have no testing.TB: it
// returns a pool on a fresh migrated database and a cleanup that closes the pool and drops
// the database. It panics when no database can be made.
func ExamplePool() (*pgxpool.Pool, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tpl, err := ensureTemplate()
	if err != nil {
		panic(err)
	}
	admin, err := adminPool(ctx)
	if err != nil {
		panic(err)
	}
	srv, err := getServer()
	if err != nil {
		panic(err)
	}
	name := fmt.Sprintf("tenure_t_%d_%s", os.Getpid(), randomHex(6))
	if err := createDatabase(ctx, admin, name, tpl); err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, pgserver.DatabaseURL(srv.URL, name))
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = dropDatabase(ctx, admin, name)
	}
}
