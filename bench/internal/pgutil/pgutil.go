// Package pgutil holds the PostgreSQL plumbing the bench needs: fresh databases per run,
// server settings for the report, server CPU attribution and queue-table statistics.
package pgutil

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/bench/internal/procstat"
)

// DefaultAdminURL is used when neither a flag nor BENCH_ADMIN_URL names the server.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// WithDatabase returns adminURL pointing at database name instead.
func WithDatabase(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", fmt.Errorf("pgutil: parse admin url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DatabaseName returns the database named by a postgres URL (empty if none).
func DatabaseName(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// CreateDatabase drops name if it exists and creates it empty.
func CreateDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("pgutil: connect admin: %w", err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgutil: drop %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return fmt.Errorf("pgutil: create %s: %w", name, err)
	}
	return nil
}

// DropDatabase drops name, terminating any connection still using it.
func DropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("pgutil: connect admin: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// NewPool opens a pool of at most maxConns connections to dbURL.
func NewPool(ctx context.Context, dbURL string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// ServerInfo is what the report says about the server.
type ServerInfo struct {
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
}

var reportedSettings = []string{
	"shared_buffers", "synchronous_commit", "fsync", "full_page_writes", "max_connections",
	"work_mem", "wal_level", "max_wal_size", "checkpoint_timeout", "autovacuum",
	"autovacuum_naptime", "autovacuum_vacuum_scale_factor", "random_page_cost",
	"effective_io_concurrency", "huge_pages", "jit",
}

// ReadServerInfo reads the version and the settings that matter for a queue benchmark.
func ReadServerInfo(ctx context.Context, adminURL string) (ServerInfo, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return ServerInfo{}, err
	}
	defer conn.Close(ctx)
	var info ServerInfo
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&info.Version); err != nil {
		return info, err
	}
	rows, err := conn.Query(ctx,
		`SELECT name, setting, coalesce(unit, '') FROM pg_settings WHERE name = ANY($1) ORDER BY name`,
		reportedSettings)
	if err != nil {
		return info, err
	}
	info.Settings = map[string]string{}
	for rows.Next() {
		var name, setting, unit string
		if err := rows.Scan(&name, &setting, &unit); err != nil {
			return info, err
		}
		info.Settings[name] = humanSetting(setting, unit)
	}
	return info, rows.Err()
}

func humanSetting(setting, unit string) string {
	switch unit {
	case "8kB":
		var n int64
		if _, err := fmt.Sscan(setting, &n); err == nil {
			return humanBytes(n * 8192)
		}
	case "kB":
		var n int64
		if _, err := fmt.Sscan(setting, &n); err == nil {
			return humanBytes(n * 1024)
		}
	case "MB":
		var n int64
		if _, err := fmt.Sscan(setting, &n); err == nil {
			return humanBytes(n << 20)
		}
	case "":
		return setting
	}
	return setting + unit
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dkB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// ServerCPU measures the CPU the PostgreSQL server spends on one database between Start and
// Stop. It snapshots every process named "postgres" and then counts only:
//   - the postmaster (the root of the postgres process tree),
//   - auxiliary processes shared by the whole cluster (checkpointer, background writer,
//     walwriter, autovacuum launcher, ...: pg_stat_activity rows with no database), and
//   - every backend or autovacuum worker whose pg_stat_activity.datname is this database,
//
// so that other databases' clients on a shared server are not billed to the run. Backends
// must still be alive at Stop (close the pools afterwards).
type ServerCPU struct {
	conn   *pgx.Conn
	dbName string
	before procstat.Snapshot
	ok     bool
}

// StartServerCPU opens a monitoring connection to dbURL and takes the before snapshot. If
// /proc is unreadable the measurement degrades to zero and OK reports false.
func StartServerCPU(ctx context.Context, dbURL string) (*ServerCPU, error) {
	conn, err := ConnectMeter(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	s := &ServerCPU{conn: conn, dbName: DatabaseName(dbURL)}
	snap, err := procstat.PostgresProcs()
	s.before, s.ok = snap, err == nil && len(snap) > 0
	return s, nil
}

// Reset takes a fresh before snapshot (call it when the measured interval starts).
func (s *ServerCPU) Reset() {
	if snap, err := procstat.PostgresProcs(); err == nil {
		s.before = snap
	}
}

// Conn is the monitoring connection (for other readings of the same interval).
func (s *ServerCPU) Conn() *pgx.Conn { return s.conn }

// OK reports whether server processes were visible in /proc.
func (s *ServerCPU) OK() bool { return s.ok }

// Stop takes the after snapshot and returns the attributed CPU and the unattributed total of
// all postgres processes (for reference).
func (s *ServerCPU) Stop(ctx context.Context) (attributed, all time.Duration, err error) {
	after, err := procstat.PostgresProcs()
	if err != nil {
		return 0, 0, err
	}
	rows, err := s.conn.Query(ctx,
		`SELECT pid FROM pg_stat_activity WHERE datname = $1 OR datname IS NULL`, s.dbName)
	if err != nil {
		return 0, 0, err
	}
	keep := map[int]bool{}
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			return 0, 0, err
		}
		keep[int(pid)] = true
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	for pid, p := range after {
		if _, isPG := after[p.PPID]; !isPG {
			keep[pid] = true // the postmaster
		}
	}
	for pid, d := range procstat.Delta(s.before, after) {
		all += d
		if keep[pid] {
			attributed += d
		}
	}
	return attributed, all, nil
}

// Close closes the monitoring connection.
func (s *ServerCPU) Close(ctx context.Context) { _ = s.conn.Close(ctx) }

// DeadTuples returns pg_stat_user_tables.n_dead_tup of the table schema.name as seen by a new
// connection to dbURL, after forcing the stats of that connection out and giving exiting
// backends a moment to flush theirs (a backend flushes its pending counters when it exits,
// so close the measured pools first).
func DeadTuples(ctx context.Context, dbURL, qualifiedTable string) (int64, error) {
	time.Sleep(600 * time.Millisecond)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	schema, table, ok := strings.Cut(qualifiedTable, ".")
	if !ok {
		schema, table = "public", qualifiedTable
	}
	_, _ = conn.Exec(ctx, "SELECT pg_stat_force_next_flush()") // PG15+; harmless if absent
	var n int64
	err = conn.QueryRow(ctx,
		`SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`,
		schema, table).Scan(&n)
	return n, err
}

// HoldXmin opens a connection to dbURL and leaves a transaction open that owns an xid
// (BEGIN; SELECT txid_current()), which pins the database's xmin horizon so that no dead row
// version created afterwards can be vacuumed or pruned until release is called.
func HoldXmin(ctx context.Context, dbURL string) (release func(), err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Close(ctx)
		return nil, err
	}
	var xid int64
	if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(c)
		_ = conn.Close(c)
	}, nil
}

// ActiveReaders starts n sessions on dbURL that each keep a REPEATABLE READ transaction open
// for hold and scan qualifiedTable in it every 100 ms (a report query that reads the queue
// table), then commit and begin the next. Their starts are staggered by hold/n, so at every
// instant some snapshot up to hold old pins the xmin horizon while the sessions also compete
// for the CPU. release stops them and waits until every session has ended.
func ActiveReaders(ctx context.Context, dbURL, qualifiedTable string, n int, hold time.Duration) (release func(), err error) {
	conns := make([]*pgx.Conn, 0, n)
	for range n {
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			for _, c := range conns {
				_ = c.Close(ctx)
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, n)
	query := "SELECT count(*), max(id) FROM " + qualifiedTable
	for i, c := range conns {
		go func() {
			defer func() { done <- struct{}{} }()
			defer func() { _ = c.Close(context.Background()) }()
			select { // stagger
			case <-time.After(time.Duration(i) * hold / time.Duration(max(1, n))):
			case <-rctx.Done():
				return
			}
			for rctx.Err() == nil {
				tx, err := c.BeginTx(rctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
				if err != nil {
					return
				}
				end := time.Now().Add(hold)
				for rctx.Err() == nil && time.Now().Before(end) {
					var cnt, maxID *int64
					if err := tx.QueryRow(rctx, query).Scan(&cnt, &maxID); err != nil {
						break
					}
					select {
					case <-time.After(100 * time.Millisecond):
					case <-rctx.Done():
					}
				}
				_ = tx.Rollback(context.Background())
			}
		}()
	}
	return func() {
		cancel()
		for range conns {
			<-done
		}
	}, nil
}

// EnableStatements creates the pg_stat_statements extension in the admin database (the server
// must preload it), so that Statements can read it.
func EnableStatements(ctx context.Context, adminURL string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	return err
}

// Statement is one normalized statement's totals in pg_stat_statements for one database.
type Statement struct {
	QueryID    int64   `json:"-"`
	Query      string  `json:"query"` // its sqlc name ("-- name: X") or its first 80 characters
	Calls      int64   `json:"calls"`
	TotalMs    float64 `json:"total_ms"`
	MeanUs     float64 `json:"mean_us"`
	Rows       int64   `json:"rows"`
	SharedBlks int64   `json:"shared_blks"` // hit + read
	WALBytes   int64   `json:"wal_bytes"`
	// WALFPI is the number of full-page images the statement wrote to the WAL: a page's first
	// change after a checkpoint logs the whole 8 kB page (full_page_writes, on by default).
	WALFPI int64 `json:"wal_fpi"`
}

// Statements returns the top n statements by total execution time that ran in the database
// of dbURL, read through the server's postgres database (where EnableStatements created the
// view); nil when pg_stat_statements is not available.
func Statements(ctx context.Context, dbURL string, n int) []Statement {
	admin, err := WithDatabase(dbURL, "postgres")
	if err != nil {
		return nil
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT queryid, query, calls, total_exec_time, rows, shared_blks_hit + shared_blks_read, wal_bytes::bigint, wal_fpi
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
		ORDER BY total_exec_time DESC LIMIT $2`, DatabaseName(dbURL), n)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var st Statement
		var q string
		if rows.Scan(&st.QueryID, &q, &st.Calls, &st.TotalMs, &st.Rows, &st.SharedBlks, &st.WALBytes, &st.WALFPI) != nil {
			return nil
		}
		st.Query = statementName(q)
		if st.Calls > 0 {
			st.MeanUs = st.TotalMs * 1000 / float64(st.Calls)
		}
		out = append(out, st)
	}
	return out
}

// statementName is a statement's sqlc name, else its first 80 characters on one line.
func statementName(q string) string {
	if i := strings.Index(q, "-- name: "); i >= 0 {
		name := q[i+len("-- name: "):]
		if j := strings.IndexAny(name, " \n"); j >= 0 {
			name = name[:j]
		}
		return name
	}
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 80 {
		q = q[:80]
	}
	return q
}

// StatementsSince returns the top n statements of after by execution time spent since before
// (two Statements snapshots of the same database).
func StatementsSince(before, after []Statement, n int) []Statement {
	prev := map[int64]Statement{}
	for _, s := range before {
		prev[s.QueryID] = s
	}
	var out []Statement
	for _, s := range after {
		p := prev[s.QueryID]
		d := Statement{QueryID: s.QueryID, Query: s.Query, Calls: s.Calls - p.Calls, TotalMs: s.TotalMs - p.TotalMs,
			Rows: s.Rows - p.Rows, SharedBlks: s.SharedBlks - p.SharedBlks, WALBytes: s.WALBytes - p.WALBytes, WALFPI: s.WALFPI - p.WALFPI}
		if d.Calls <= 0 {
			continue
		}
		d.MeanUs = d.TotalMs * 1000 / float64(d.Calls)
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TotalMs > out[j].TotalMs })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// WAL is the server's cluster-wide WAL and checkpoint counters: bytes from the WAL insert
// position (exact), records and full-page images from pg_stat_wal (PostgreSQL 14+; backends
// flush their counts at most once a second, so an interval's figures can be off by about a
// second's worth), checkpoints from pg_stat_bgwriter. The difference of two readings is what
// the server wrote in between, for every database: meter an interval in which only one system
// runs.
type WAL struct {
	Records     int64 `json:"records"`
	FPI         int64 `json:"fpi"` // full-page images
	Bytes       int64 `json:"bytes"`
	Checkpoints int64 `json:"checkpoints"` // timed and requested, started
}

// Sub returns w - before.
func (w WAL) Sub(before WAL) WAL {
	return WAL{Records: w.Records - before.Records, FPI: w.FPI - before.FPI, Bytes: w.Bytes - before.Bytes,
		Checkpoints: w.Checkpoints - before.Checkpoints}
}

// ReadWAL reads the server's WAL and checkpoint counters through conn.
func ReadWAL(ctx context.Context, conn *pgx.Conn) (WAL, error) {
	var w WAL
	err := conn.QueryRow(ctx, `SELECT w.wal_records, w.wal_fpi, pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint,
			b.checkpoints_timed + b.checkpoints_req
		FROM pg_stat_wal w, pg_stat_bgwriter b`).Scan(&w.Records, &w.FPI, &w.Bytes, &w.Checkpoints)
	return w, err
}

// MeterAppName is the application_name of the bench's own measuring connections (server CPU,
// connection counts), so that ConnSampler does not count them as the queue's.
const MeterAppName = "tenure-bench-meter"

// ConnectMeter opens a measuring connection to dbURL, marked with MeterAppName.
func ConnectMeter(ctx context.Context, dbURL string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = MeterAppName
	return pgx.ConnectConfig(ctx, cfg)
}

// ConnSampler counts, every period, the client connections to one database that are not the
// bench's measuring connections (pg_stat_activity), and keeps the largest count: every
// connection the process under test holds, whichever pool opened it (a session taken out of
// its pool for LISTEN included).
type ConnSampler struct {
	max  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

// StartConnSampler starts sampling on its own connection until Stop.
func StartConnSampler(ctx context.Context, dbURL string, period time.Duration) (*ConnSampler, error) {
	conn, err := ConnectMeter(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	s := &ConnSampler{stop: make(chan struct{}), done: make(chan struct{})}
	sample := func() {
		var n int64
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := conn.QueryRow(qctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend'
			  AND coalesce(application_name, '') <> $1`, MeterAppName).Scan(&n)
		if err == nil && n > s.max.Load() {
			s.max.Store(n)
		}
	}
	sample()
	go func() {
		defer close(s.done)
		defer conn.Close(context.Background())
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				sample()
				return
			case <-ctx.Done():
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return s, nil
}

// Stop ends the sampling and returns the largest count seen.
func (s *ConnSampler) Stop() int64 {
	close(s.stop)
	<-s.done
	return s.max.Load()
}
