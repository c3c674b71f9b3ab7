package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func openPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// migratedBelow returns a pool on a new database migrated up to (not including) version v, and
// how many migrations from v on the binary holds (the steps Down takes to get back there). It
// migrates all the way up first, so the down migrations from v on run too.
func migratedBelow(t *testing.T, v int) (*pgxpool.Pool, int) {
	t.Helper()
	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewEmptyDB(t), 4)
	_, err := migrations.Up(ctx, pool)
	require.NoError(t, err)
	above := 0
	for _, m := range migrations.All() {
		if m.Version >= v {
			above++
		}
	}
	reverted, err := migrations.Down(ctx, pool, above)
	require.NoError(t, err)
	require.Len(t, reverted, above)
	require.Equal(t, v, reverted[len(reverted)-1].Version)
	return pool, above
}

func versions(ms []migrations.Migration) []int {
	out := []int{}
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}

func knownVersions() []int { return versions(migrations.All()) }

func reversed(v []int) []int {
	out := make([]int, len(v))
	for i := range v {
		out[len(v)-1-i] = v[i]
	}
	return out
}

func TestEmbeddedMigrations(t *testing.T) {
	all := migrations.All()
	require.NotEmpty(t, all)
	for i, m := range all {
		assert.Positive(t, m.Version)
		assert.NotEmpty(t, m.Name)
		assert.NotEmpty(t, m.Up)
		assert.NotEmpty(t, m.Down)
		if i > 0 {
			assert.Greater(t, m.Version, all[i-1].Version)
		}
	}
	assert.Equal(t, all[len(all)-1].Version, migrations.Latest())
	assert.Len(t, migrations.Hash(), 64)
	assert.Equal(t, migrations.Hash(), migrations.Hash())
}

func TestParse(t *testing.T) {
	ok, err := migrations.Parse(fstest.MapFS{
		"0002_b.up.sql":   {Data: []byte("select 2")},
		"0002_b.down.sql": {Data: []byte("select -2")},
		"0001_a.up.sql":   {Data: []byte("select 1")},
		"0001_a.down.sql": {Data: []byte("select -1")},
		"README.md":       {Data: []byte("ignored")},
	})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2}, versions(ok))
	assert.Equal(t, "select -2", ok[1].Down)

	for name, fsys := range map[string]fstest.MapFS{
		"bad name":     {"1-a.up.sql": {Data: []byte("x")}},
		"no down":      {"0001_a.up.sql": {Data: []byte("x")}},
		"no up":        {"0001_a.down.sql": {Data: []byte("x")}},
		"empty up":     {"0001_a.up.sql": {Data: []byte(" \n")}, "0001_a.down.sql": {Data: []byte("x")}},
		"two names":    {"0001_a.up.sql": {Data: []byte("x")}, "0001_b.down.sql": {Data: []byte("x")}},
		"zero version": {"0000_a.up.sql": {Data: []byte("x")}, "0000_a.down.sql": {Data: []byte("x")}},
	} {
		_, err := migrations.Parse(fsys)
		assert.Error(t, err, name)
	}
}

// schemaSQL is db/schema.sql, the schema sqlc reads and the migrations must reproduce.
func schemaSQL(t *testing.T) string {
	b, err := os.ReadFile("../schema.sql")
	require.NoError(t, err)
	return string(b)
}

// TestSchemaMatchesMigrations: applying every migration yields exactly db/schema.sql.
func TestSchemaMatchesMigrations(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)

	fromSchema := openPool(t, pgtest.NewEmptyDB(t), 2)
	_, err := fromSchema.Exec(ctx, schemaSQL(t))
	require.NoError(t, err, "applying db/schema.sql")

	fromMigrations := openPool(t, pgtest.NewEmptyDB(t), 2)
	applied, err := migrations.Up(ctx, fromMigrations)
	require.NoError(t, err)
	require.Equal(t, knownVersions(), versions(applied))

	want := dumpCatalog(t, ctx, fromSchema)
	got := dumpCatalog(t, ctx, fromMigrations)
	require.NotEmpty(t, want)
	require.True(t, strings.HasPrefix(want[0], "relation: "), "sanity: the dump lists tables first, got %q", want[0])
	if d := catalogDiff(want, got); d != "" {
		t.Errorf("the catalog produced by db/migrations differs from db/schema.sql; add a migration "+
			"(or fix the last one) so that both describe the same schema:\n%s", d)
	}
}

// catalogDiff lists the lines only in want (-) or only in got (+); "" when equal.
func catalogDiff(want, got []string) string {
	inWant, inGot := map[string]int{}, map[string]int{}
	for _, l := range want {
		inWant[l]++
	}
	for _, l := range got {
		inGot[l]++
	}
	var b strings.Builder
	for _, l := range want {
		if inGot[l] > 0 {
			inGot[l]--
			continue
		}
		fmt.Fprintf(&b, "- only in db/schema.sql:  %s\n", l)
	}
	for _, l := range got {
		if inWant[l] > 0 {
			inWant[l]--
			continue
		}
		fmt.Fprintf(&b, "+ only in db/migrations: %s\n", l)
	}
	return b.String()
}

// driftFixture is a small schema of every kind of object the catalog dump covers, independent
// of db/schema.sql so that the test below keeps working as the real schema evolves.
const driftFixture = `
CREATE SCHEMA tenure;
CREATE TYPE tenure.st AS ENUM ('a', 'b');
CREATE TABLE tenure.t (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    n  smallint  NOT NULL DEFAULT 2,
    s  tenure.st NOT NULL DEFAULT 'a',
    x  text,
    CONSTRAINT t_n CHECK (n BETWEEN 0 AND 9)
);
CREATE INDEX t_idx ON tenure.t (n, id) WHERE s = 'a';
CREATE FUNCTION tenure.f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;
CREATE TRIGGER t_trg AFTER INSERT ON tenure.t FOR EACH STATEMENT EXECUTE FUNCTION tenure.f();
`

// TestCatalogDumpDetectsDrift proves that the comparison above notices each kind of change.
func TestCatalogDumpDetectsDrift(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewEmptyDB(t), 2)
	_, err := pool.Exec(ctx, driftFixture)
	require.NoError(t, err)
	base := dumpCatalog(t, ctx, pool)

	for _, change := range []string{
		`ALTER TABLE tenure.t ALTER COLUMN n SET DEFAULT 3`,
		`ALTER TABLE tenure.t ALTER COLUMN x SET NOT NULL`,
		`ALTER TABLE tenure.t ALTER COLUMN n TYPE integer`,
		`ALTER TABLE tenure.t ALTER COLUMN x TYPE varchar(10)`,
		`ALTER TABLE tenure.t ADD COLUMN extra text`,
		`ALTER TABLE tenure.t DROP COLUMN x`,
		`ALTER TABLE tenure.t DROP CONSTRAINT t_n`,
		`ALTER TABLE tenure.t DROP CONSTRAINT t_n, ADD CONSTRAINT t_n CHECK (n BETWEEN 0 AND 8)`,
		`ALTER TABLE tenure.t ADD CONSTRAINT t_x UNIQUE (x)`,
		`DROP INDEX tenure.t_idx; CREATE INDEX t_idx ON tenure.t (n) WHERE s = 'a'`,
		`CREATE INDEX t_extra_idx ON tenure.t (x)`,
		`CREATE OR REPLACE FUNCTION tenure.f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END; $$`,
		`CREATE FUNCTION tenure.g(a int) RETURNS int LANGUAGE sql AS 'SELECT a'`,
		`DROP TRIGGER t_trg ON tenure.t`,
		`DROP TRIGGER t_trg ON tenure.t; CREATE TRIGGER t_trg AFTER UPDATE ON tenure.t FOR EACH STATEMENT EXECUTE FUNCTION tenure.f()`,
		`ALTER TABLE tenure.t DISABLE TRIGGER t_trg`,
		`ALTER TYPE tenure.st ADD VALUE 'c'`,
		`CREATE TYPE tenure.extra AS ENUM ('a')`,
		`CREATE DOMAIN tenure.pos AS int CHECK (VALUE > 0)`,
		`CREATE TABLE tenure.extra (id int)`,
		`CREATE SEQUENCE tenure.seq`,
		`CREATE VIEW tenure.v AS SELECT id FROM tenure.t`,
		`ALTER TABLE tenure.t ENABLE ROW LEVEL SECURITY`,
		`COMMENT ON TABLE tenure.t IS 'x'`,
		`COMMENT ON COLUMN tenure.t.x IS 'x'`,
	} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, change)
		require.NoError(t, err, change)
		changed := dumpCatalog(t, ctx, tx)
		require.NoError(t, tx.Rollback(ctx))
		assert.NotEmpty(t, catalogDiff(base, changed), "the catalog dump does not notice: %s", change)
	}
}

// TestConcurrentUp: several instances migrating one empty database at once all succeed and
// apply each migration exactly once between them.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	url := pgtest.NewEmptyDB(t)
	const n = 4
	pools := make([]*pgxpool.Pool, n)
	for i := range pools {
		pools[i] = openPool(t, url, 2)
		require.NoError(t, pools[i].Ping(ctx))
	}

	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([][]migrations.Migration, n)
	errs := make([]error, n)
	for i := range pools {
		wg.Go(func() {
			<-start
			results[i], errs[i] = migrations.Up(ctx, pools[i])
		})
	}
	close(start)
	wg.Wait()

	count := map[int]int{}
	for i := range pools {
		require.NoError(t, errs[i], "migrator %d", i)
		for _, m := range results[i] {
			count[m.Version]++
		}
	}
	for _, v := range knownVersions() {
		assert.Equal(t, 1, count[v], "version %d applied by %d migrators", v, count[v])
	}
	var rows int
	require.NoError(t, pools[0].QueryRow(ctx, "SELECT count(*) FROM tenure.schema_migrations").Scan(&rows))
	assert.Equal(t, len(knownVersions()), rows)
	assertNoAdvisoryLocks(t, ctx, pools[0])
}

func assertNoAdvisoryLocks(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	var held int
	require.NoError(t, pool.QueryRow(ctx,
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&held))
	assert.Zero(t, held, "advisory locks left held")
}

func TestUpDownUpAndStatus(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewEmptyDB(t), 4)
	all := knownVersions()

	// Status on a never-migrated database: everything pending, nothing created.
	st, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	require.Len(t, st, len(all))
	for _, s := range st {
		assert.False(t, s.Applied)
		assert.True(t, s.AppliedAt.IsZero())
		assert.False(t, s.Unknown)
	}
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regnamespace('tenure') IS NOT NULL").Scan(&exists))
	assert.False(t, exists, "Status must not create anything")

	// Down on a never-migrated database does nothing.
	reverted, err := migrations.Down(ctx, pool, 1)
	require.NoError(t, err)
	assert.Empty(t, reverted)

	applied, err := migrations.Up(ctx, pool)
	require.NoError(t, err)
	assert.Equal(t, all, versions(applied))
	migrated := dumpCatalog(t, ctx, pool)

	st, err = migrations.Status(ctx, pool)
	require.NoError(t, err)
	require.Len(t, st, len(all))
	for i, s := range st {
		assert.Equal(t, all[i], s.Version)
		assert.True(t, s.Applied)
		assert.WithinDuration(t, time.Now(), s.AppliedAt, time.Minute)
	}

	applied, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
	assert.Empty(t, applied, "second Up applies nothing")

	_, err = migrations.Down(ctx, pool, 0)
	assert.Error(t, err)

	reverted, err = migrations.Down(ctx, pool, 1)
	require.NoError(t, err)
	assert.Equal(t, all[len(all)-1:], versions(reverted))
	st, err = migrations.Status(ctx, pool)
	require.NoError(t, err)
	assert.False(t, st[len(st)-1].Applied)

	reverted, err = migrations.Down(ctx, pool, 1000)
	require.NoError(t, err)
	assert.Equal(t, reversed(all[:len(all)-1]), versions(reverted))

	// Down to zero leaves only the runner's (empty) version table in schema tenure.
	assert.Empty(t, dumpCatalog(t, ctx, pool))
	var objects []string
	rows, err := pool.Query(ctx, "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'tenure' ORDER BY 1")
	require.NoError(t, err)
	objects, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"schema_migrations", "schema_migrations_pkey"}, objects)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.schema_migrations").Scan(&n))
	assert.Zero(t, n)

	applied, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
	assert.Equal(t, all, versions(applied))
	assert.Equal(t, migrated, dumpCatalog(t, ctx, pool), "Up after Down to zero rebuilds the same schema")
	assertNoAdvisoryLocks(t, ctx, pool)
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewEmptyDB(t), 2)
	_, err := migrations.Up(ctx, pool)
	require.NoError(t, err)
	future := migrations.Latest() + 1
	_, err = pool.Exec(ctx, "INSERT INTO tenure.schema_migrations (version, name) VALUES ($1, 'from_the_future')", future)
	require.NoError(t, err)

	_, err = migrations.Up(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrSchemaTooNew)
	var tooNew *migrations.SchemaTooNewError
	require.ErrorAs(t, err, &tooNew)
	assert.Equal(t, []int{future}, tooNew.Unknown)
	assert.Equal(t, migrations.Latest(), tooNew.Latest)

	_, err = migrations.Down(ctx, pool, 1)
	require.ErrorIs(t, err, migrations.ErrSchemaTooNew)

	st, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	last := st[len(st)-1]
	assert.Equal(t, migrations.MigrationStatus{Version: future, Name: "from_the_future", Applied: true, AppliedAt: last.AppliedAt, Unknown: true}, last)

	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.schema_migrations").Scan(&n))
	assert.Equal(t, len(knownVersions())+1, n, "a refused run changes nothing")
	assertNoAdvisoryLocks(t, ctx, pool)
}

// TestFailedMigrationRollsBack: a failing migration leaves neither its changes nor its
// version row, keeps the ones applied before it, and releases the lock.
func TestFailedMigrationRollsBack(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })

	set := []migrations.Migration{
		{Version: 1, Name: "one", Up: "CREATE TABLE tenure.one (id int);", Down: "DROP TABLE tenure.one;"},
		{Version: 2, Name: "two", Up: "CREATE TABLE tenure.two (id int); SELECT 1/0;", Down: "DROP TABLE tenure.two;"},
	}
	applied, err := migrations.UpWith(ctx, conn, set)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "0002_two")
	assert.Equal(t, []int{1}, versions(applied))

	st, err := migrations.StatusWith(ctx, conn, set)
	require.NoError(t, err)
	assert.True(t, st[0].Applied)
	assert.False(t, st[1].Applied)
	var two bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT to_regclass('tenure.two') IS NOT NULL").Scan(&two))
	assert.False(t, two)

	var held int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").Scan(&held))
	assert.Zero(t, held)

	set[1].Up = "CREATE TABLE tenure.two (id int);"
	applied, err = migrations.UpWith(ctx, conn, set)
	require.NoError(t, err)
	assert.Equal(t, []int{2}, versions(applied))
	reverted, err := migrations.DownWith(ctx, conn, set, 5)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 1}, versions(reverted))
}

// TestConnVariants: the *pgx.Conn API works on a plain connection and leaves it usable.
func TestConnVariants(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })

	applied, err := migrations.UpConn(ctx, conn)
	require.NoError(t, err)
	assert.Equal(t, knownVersions(), versions(applied))
	st, err := migrations.StatusConn(ctx, conn)
	require.NoError(t, err)
	assert.True(t, st[0].Applied)
	reverted, err := migrations.DownConn(ctx, conn, len(applied))
	require.NoError(t, err)
	assert.Equal(t, reversed(knownVersions()), versions(reverted))
	assert.False(t, conn.IsClosed())
}

// TestUpWaitsForLock: a runner blocked on the advisory lock proceeds once it is released,
// and gives up when its context ends.
func TestUpWaitsForLock(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	url := pgtest.NewEmptyDB(t)
	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close(context.Background()) })
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrations.LockKey)
	require.NoError(t, err)

	pool := openPool(t, url, 2)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = migrations.Up(short, pool)
	cancel()
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded) || short.Err() != nil)

	done := make(chan error, 1)
	go func() {
		_, err := migrations.Up(ctx, pool)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Up returned while the lock was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrations.LockKey)
	require.NoError(t, err)
	require.NoError(t, <-done)
}
