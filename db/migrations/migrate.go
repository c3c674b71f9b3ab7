package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/internal/locks"
)

//go:embed *.sql
var files embed.FS

// LockKey is the key of the session-level PostgreSQL advisory lock (pg_advisory_lock) that
// the runner holds for the whole of an Up or Down run, so that concurrent runners (several
// application instances starting at once) apply each migration exactly once. Its value is
// the ASCII bytes "tenure" followed by 0x0001 (locks.Migrate; internal/locks lists every
// advisory lock key Tenure uses). Other tools must not use this key.
const LockKey int64 = int64(locks.Migrate)

// ErrInvalidSchema is wrapped by the error refusing a schema name (Options.Schema,
// jobs.Config.Schema, worker.Config.Schema, ...): a *InvalidSchemaError. Test for it with
// errors.Is.
var ErrInvalidSchema = dbschema.ErrInvalid

// InvalidSchemaError is the error refusing a schema name: its Name and the Reason. It unwraps
// to ErrInvalidSchema. A usable name is a plain lower-case identifier (a-z, 0-9, '_', not
// starting with a digit) of at most 56 bytes that is not a reserved SQL keyword, not "public"
// and not a system schema (pg_*, information_schema).
type InvalidSchemaError = dbschema.InvalidError

// DefaultSchema is the schema Tenure lives in unless configured otherwise ("tenure").
const DefaultSchema = dbschema.Default

// Options configure a Runner. The zero Options are the defaults.
type Options struct {
	// Schema is the PostgreSQL schema every object of Tenure is created in and read from.
	// Default DefaultSchema ("tenure"). Each schema is a Tenure of its own: its own tables,
	// functions, version table, NOTIFY channels and advisory lock keys (docs/guide.md, "A
	// schema of your own"). An invalid name is refused with an *InvalidSchemaError.
	Schema string
}

// Runner applies, reverts and reports the migrations in one schema. The package functions
// (Up, Down, Status, Check and the Conn variants) are a Runner of the default schema. A Runner
// is safe for concurrent use (runs on one schema exclude each other through its lock).
type Runner struct {
	s *dbschema.Schema
}

// NewRunner returns a Runner for opts.Schema, or an *InvalidSchemaError.
func NewRunner(opts Options) (*Runner, error) {
	s, err := dbschema.New(opts.Schema)
	if err != nil {
		return nil, err
	}
	return &Runner{s: s}, nil
}

var defaultRunner = &Runner{s: dbschema.Must(dbschema.Default)}

// Schema is the runner's schema.
func (r *Runner) Schema() string { return r.s.Name() }

// LockKey is the advisory lock key this runner holds for an Up or Down run: the package's
// LockKey for the default schema, a key derived from the schema otherwise.
func (r *Runner) LockKey() int64 { return r.s.Key(locks.Migrate) }

// VersionTable is the qualified name of this runner's version table
// (schema.schema_migrations).
func (r *Runner) VersionTable() string { return r.s.Qualify("schema_migrations") }

// Migrations returns every embedded migration as this runner applies it: the text of the
// files, rewritten for the schema (unchanged for the default schema).
func (r *Runner) Migrations() []Migration {
	ms := All()
	for i := range ms {
		ms[i].Up, ms[i].Down = r.s.Rewrite(ms[i].Up), r.s.Rewrite(ms[i].Down)
	}
	return ms
}

func (r *Runner) known() ([]Migration, error) {
	if _, err := load(); err != nil {
		return nil, err
	}
	return r.Migrations(), nil
}

// VersionTable is the fully qualified name of the table in which the runner records the
// applied migrations: tenure.schema_migrations (version integer primary key, name text not
// null, applied_at timestamptz not null default now()). The runner creates it when missing.
const VersionTable = "tenure.schema_migrations"

// ErrSchemaTooNew is returned (wrapped in a *SchemaTooNewError) by Up and Down when the
// database has a migration applied that this binary does not know, typically because a
// newer release of Tenure already migrated it. Running older code against a newer schema is
// refused rather than guessed at. Test for it with errors.Is.
var ErrSchemaTooNew = errors.New("migrations: database schema is newer than this binary")

// SchemaTooNewError is the error returned when the database holds applied migration
// versions unknown to this binary. It unwraps to ErrSchemaTooNew.
type SchemaTooNewError struct {
	// Unknown lists the applied versions this binary does not know, ascending.
	Unknown []int
	// Latest is the highest version this binary knows (0 when it knows none).
	Latest int
}

// Error describes the unknown versions.
func (e *SchemaTooNewError) Error() string {
	vs := make([]string, len(e.Unknown))
	for i, v := range e.Unknown {
		vs[i] = strconv.Itoa(v)
	}
	return fmt.Sprintf("%v: applied version(s) %s unknown, this binary knows up to %d; upgrade the binary",
		ErrSchemaTooNew, strings.Join(vs, ", "), e.Latest)
}

// Unwrap returns ErrSchemaTooNew.
func (e *SchemaTooNewError) Unwrap() error { return ErrSchemaTooNew }

// Migration is one numbered schema change, as embedded in the binary.
type Migration struct {
	// Version is the migration's number, the NNNN of its file names. Versions are unique
	// and applied in ascending order.
	Version int
	// Name is the part of the file name between the version and ".up.sql".
	Name string
	// Up is the SQL that applies the migration.
	Up string
	// Down is the SQL that reverts it.
	Down string
}

// MigrationStatus reports one migration's state in a database.
type MigrationStatus struct {
	// Version is the migration's number.
	Version int
	// Name is the migration's name (for an Unknown one, the name recorded in the database).
	Name string
	// Applied reports whether the version is recorded in the version table.
	Applied bool
	// AppliedAt is when it was applied; the zero time when it is not applied.
	AppliedAt time.Time
	// Unknown reports a version applied in the database but not known to this binary
	// (see ErrSchemaTooNew).
	Unknown bool
}

var fileNameRE = regexp.MustCompile(`^([0-9]+)_([A-Za-z0-9_]+)\.(up|down)\.sql$`)

var load = sync.OnceValues(func() ([]Migration, error) { return parse(files) })

// parse reads NNNN_name.{up,down}.sql files from fsys. Every version needs both files,
// with the same name, and versions must be unique and positive.
func parse(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		m := fileNameRE.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: file %q is not named NNNN_name.up.sql or NNNN_name.down.sql", e.Name())
		}
		v, err := strconv.Atoi(m[1])
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migrations: file %q: version must be a positive integer", e.Name())
		}
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		} else if mig.Name != m[2] {
			return nil, fmt.Errorf("migrations: version %d has two names, %q and %q", v, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if strings.TrimSpace(m.Up) == "" {
			return nil, fmt.Errorf("migrations: version %d (%s) has no (or an empty) up file", m.Version, m.Name)
		}
		if strings.TrimSpace(m.Down) == "" {
			return nil, fmt.Errorf("migrations: version %d (%s) has no (or an empty) down file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// All returns every migration embedded in the binary, ascending by version. It panics if
// the embedded files are malformed, which the package's tests rule out.
func All() []Migration {
	ms, err := load()
	if err != nil {
		panic(err)
	}
	return slices.Clone(ms)
}

// Latest returns the highest version embedded in the binary (0 when there is none).
func Latest() int {
	ms := All()
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Hash returns a hex SHA-256 digest of the embedded migration files (names and contents).
// It changes whenever a migration is added or edited; test harnesses use it to name a
// template database built from these migrations.
func Hash() string {
	h := sha256.New()
	for _, m := range All() {
		fmt.Fprintf(h, "%d\x00%s\x00%d\x00%s\x00%d\x00%s\x00", m.Version, m.Name, len(m.Up), m.Up, len(m.Down), m.Down)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Up is Runner.Up on the default schema.
func Up(ctx context.Context, pool *pgxpool.Pool) ([]Migration, error) {
	return defaultRunner.Up(ctx, pool)
}

// Down is Runner.Down on the default schema.
func Down(ctx context.Context, pool *pgxpool.Pool, steps int) ([]Migration, error) {
	return defaultRunner.Down(ctx, pool, steps)
}

// Status is Runner.Status on the default schema.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]MigrationStatus, error) {
	return defaultRunner.Status(ctx, pool)
}

// UpConn is Runner.UpConn on the default schema.
func UpConn(ctx context.Context, conn *pgx.Conn) ([]Migration, error) {
	return defaultRunner.UpConn(ctx, conn)
}

// DownConn is Runner.DownConn on the default schema.
func DownConn(ctx context.Context, conn *pgx.Conn, steps int) ([]Migration, error) {
	return defaultRunner.DownConn(ctx, conn, steps)
}

// StatusConn is Runner.StatusConn on the default schema.
func StatusConn(ctx context.Context, conn *pgx.Conn) ([]MigrationStatus, error) {
	return defaultRunner.StatusConn(ctx, conn)
}

// Up applies every pending migration in ascending order, each in its own transaction, and
// returns the ones it applied (none when the database is up to date). It holds the advisory
// lock LockKey on one connection acquired from pool for the whole run. It returns an error
// wrapping ErrSchemaTooNew, without changing anything, when the database has a version
// applied that this binary does not know. A version missing below the highest applied one
// (a gap) is applied too.
func (r *Runner) Up(ctx context.Context, pool *pgxpool.Pool) ([]Migration, error) {
	var applied []Migration
	err := withPoolConn(ctx, pool, func(c *pgx.Conn) error {
		var err error
		applied, err = r.UpConn(ctx, c)
		return err
	})
	return applied, err
}

// Down rolls back the steps most recently applied migrations (highest versions first), each
// in its own transaction, and returns the ones it rolled back. steps larger than the number
// of applied migrations rolls back all of them; steps must be at least 1. Like Up, it holds
// LockKey for the whole run and refuses a database with unknown versions (ErrSchemaTooNew).
func (r *Runner) Down(ctx context.Context, pool *pgxpool.Pool, steps int) ([]Migration, error) {
	var reverted []Migration
	err := withPoolConn(ctx, pool, func(c *pgx.Conn) error {
		var err error
		reverted, err = r.DownConn(ctx, c, steps)
		return err
	})
	return reverted, err
}

// Status reports every migration known to this binary, ascending, with whether it is
// applied, followed by any applied versions the binary does not know (Unknown set). It only
// reads: it takes no lock and creates nothing, and a database never migrated reports every
// migration as not applied.
func (r *Runner) Status(ctx context.Context, pool *pgxpool.Pool) ([]MigrationStatus, error) {
	var st []MigrationStatus
	err := withPoolConn(ctx, pool, func(c *pgx.Conn) error {
		var err error
		st, err = r.StatusConn(ctx, c)
		return err
	})
	return st, err
}

// UpConn is Up on a connection the caller owns. conn must not be in a transaction. The
// advisory lock is released before UpConn returns; if releasing it fails the connection is
// closed, so a lock is never left held.
func (r *Runner) UpConn(ctx context.Context, conn *pgx.Conn) ([]Migration, error) {
	known, err := r.known()
	if err != nil {
		return nil, err
	}
	return r.upConn(ctx, conn, known)
}

func (r *Runner) upConn(ctx context.Context, conn *pgx.Conn, known []Migration) ([]Migration, error) {
	var applied []Migration
	err := r.withLock(ctx, conn, func() error {
		if err := r.bootstrap(ctx, conn); err != nil {
			return err
		}
		done, err := r.appliedVersions(ctx, conn)
		if err != nil {
			return err
		}
		if err := checkKnown(known, done); err != nil {
			return err
		}
		for _, m := range known {
			if _, ok := done[m.Version]; ok {
				continue
			}
			if err := runInTx(ctx, conn, m.Up,
				"INSERT INTO "+r.VersionTable()+" (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("migrations: applying %04d_%s: %w", m.Version, m.Name, err)
			}
			applied = append(applied, m)
		}
		return nil
	})
	return applied, err
}

// DownConn is Down on a connection the caller owns, with the same lock handling as UpConn.
func (r *Runner) DownConn(ctx context.Context, conn *pgx.Conn, steps int) ([]Migration, error) {
	if steps < 1 {
		return nil, fmt.Errorf("migrations: down: steps must be at least 1, got %d", steps)
	}
	known, err := r.known()
	if err != nil {
		return nil, err
	}
	return r.downConn(ctx, conn, known, steps)
}

func (r *Runner) downConn(ctx context.Context, conn *pgx.Conn, known []Migration, steps int) ([]Migration, error) {
	var reverted []Migration
	err := r.withLock(ctx, conn, func() error {
		exists, err := r.versionTableExists(ctx, conn)
		if err != nil || !exists {
			return err
		}
		done, err := r.appliedVersions(ctx, conn)
		if err != nil {
			return err
		}
		if err := checkKnown(known, done); err != nil {
			return err
		}
		for i := len(known) - 1; i >= 0 && len(reverted) < steps; i-- {
			m := known[i]
			if _, ok := done[m.Version]; !ok {
				continue
			}
			if err := runInTx(ctx, conn, m.Down,
				"DELETE FROM "+r.VersionTable()+" WHERE version = $1", m.Version); err != nil {
				return fmt.Errorf("migrations: reverting %04d_%s: %w", m.Version, m.Name, err)
			}
			reverted = append(reverted, m)
		}
		return nil
	})
	return reverted, err
}

// StatusConn is Status on a connection the caller owns.
func (r *Runner) StatusConn(ctx context.Context, conn *pgx.Conn) ([]MigrationStatus, error) {
	known, err := r.known()
	if err != nil {
		return nil, err
	}
	return r.statusConn(ctx, conn, known)
}

func (r *Runner) statusConn(ctx context.Context, conn *pgx.Conn, known []Migration) ([]MigrationStatus, error) {
	done := map[int]appliedRow{}
	exists, err := r.versionTableExists(ctx, conn)
	if err != nil {
		return nil, err
	}
	if exists {
		if done, err = r.appliedVersions(ctx, conn); err != nil {
			return nil, err
		}
	}
	out := make([]MigrationStatus, 0, len(known))
	knownSet := map[int]bool{}
	for _, m := range known {
		knownSet[m.Version] = true
		st := MigrationStatus{Version: m.Version, Name: m.Name}
		if r, ok := done[m.Version]; ok {
			st.Applied, st.AppliedAt = true, r.at
		}
		out = append(out, st)
	}
	var unknown []MigrationStatus
	for v, r := range done {
		if !knownSet[v] {
			unknown = append(unknown, MigrationStatus{Version: v, Name: r.name, Applied: true, AppliedAt: r.at, Unknown: true})
		}
	}
	sort.Slice(unknown, func(i, j int) bool { return unknown[i].Version < unknown[j].Version })
	return append(out, unknown...), nil
}

type appliedRow struct {
	name string
	at   time.Time
}

func withPoolConn(ctx context.Context, pool *pgxpool.Pool, fn func(*pgx.Conn) error) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrations: acquiring a connection: %w", err)
	}
	// If fn closed the connection (failed unlock), Release destroys it instead of pooling it.
	defer c.Release()
	return fn(c.Conn())
}

// withLock runs fn while holding the session-level advisory lock r.LockKey() on conn.
func (r *Runner) withLock(ctx context.Context, conn *pgx.Conn, fn func() error) (err error) {
	key := r.LockKey()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return fmt.Errorf("migrations: taking advisory lock %d: %w", key, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var released bool
		uerr := conn.QueryRow(uctx, "SELECT pg_advisory_unlock($1)", key).Scan(&released)
		if uerr == nil && !released {
			uerr = errors.New("lock was not held")
		}
		if uerr != nil {
			// Closing the session is the only sure way to drop a session-level lock.
			_ = conn.Close(uctx)
			if err == nil {
				err = fmt.Errorf("migrations: releasing advisory lock %d: %w", key, uerr)
			}
		}
	}()
	return fn()
}

// bootstrap creates the schema and the version table if missing. Only called under the lock:
// concurrent CREATE ... IF NOT EXISTS statements can otherwise fail on catalog unique keys.
func (r *Runner) bootstrap(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+r.s.Name()+`;
CREATE TABLE IF NOT EXISTS `+r.VersionTable()+` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return fmt.Errorf("migrations: creating %s: %w", r.VersionTable(), err)
	}
	return nil
}

func (r *Runner) versionTableExists(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var exists bool
	err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", r.VersionTable()).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("migrations: looking up %s: %w", r.VersionTable(), err)
	}
	return exists, nil
}

func (r *Runner) appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]appliedRow, error) {
	rows, err := conn.Query(ctx, "SELECT version, name, applied_at FROM "+r.VersionTable())
	if err != nil {
		return nil, fmt.Errorf("migrations: reading %s: %w", r.VersionTable(), err)
	}
	defer rows.Close()
	out := map[int]appliedRow{}
	for rows.Next() {
		var v int32
		var row appliedRow
		if err := rows.Scan(&v, &row.name, &row.at); err != nil {
			return nil, fmt.Errorf("migrations: reading %s: %w", r.VersionTable(), err)
		}
		out[int(v)] = row
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: reading %s: %w", r.VersionTable(), err)
	}
	return out, nil
}

func checkKnown(known []Migration, done map[int]appliedRow) error {
	knownSet := make(map[int]bool, len(known))
	for _, m := range known {
		knownSet[m.Version] = true
	}
	var unknown []int
	for v := range done {
		if !knownSet[v] {
			unknown = append(unknown, v)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Ints(unknown)
	latest := 0
	if len(known) > 0 {
		latest = known[len(known)-1].Version
	}
	return &SchemaTooNewError{Unknown: unknown, Latest: latest}
}

// runInTx runs script (possibly several statements, sent with the simple protocol) and then
// the bookkeeping statement in one transaction.
func runInTx(ctx context.Context, conn *pgx.Conn, script, bookkeeping string, args ...any) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after a successful commit
	}()
	if _, err := tx.Exec(ctx, script); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, bookkeeping, args...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
