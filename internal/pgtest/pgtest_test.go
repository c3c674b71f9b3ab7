package pgtest_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func dbName(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	return strings.TrimPrefix(u.Path, "/")
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok))
	return ok
}

func TestNewPoolIsMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	assert.EqualValues(t, pgtest.DefaultMaxConns, pool.Config().MaxConns)

	st, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	for _, s := range st {
		assert.True(t, s.Applied, "version %d", s.Version)
	}
	var id int64
	require.NoError(t, pool.QueryRow(ctx,
		`INSERT INTO tenure.jobs (kind, payload) VALUES ('k', '{}') RETURNING id`).Scan(&id))
	assert.Positive(t, id)

	var isTemplate bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = current_database()").Scan(&isTemplate))
	assert.False(t, isTemplate, "tests get a clone, not the template")
}

func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.NewPool(t), pgtest.NewPool(t)
	_, err := a.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload) VALUES ('only_in_a', '{}')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
	assert.Zero(t, n)
}

func TestNewPoolWith(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 3 })
	assert.EqualValues(t, 3, pool.Config().MaxConns)
	require.NoError(t, pool.Ping(context.Background()))
}

func TestNewEmptyDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewEmptyDB(t)
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var hasSchema bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT to_regnamespace('tenure') IS NOT NULL").Scan(&hasSchema))
	assert.False(t, hasSchema)
	assert.Equal(t, dbName(t, u), dbName(t, pgtest.URLFor(t, dbName(t, u))))
}

// TestDroppedAtCleanup: databases disappear when their test ends, even with open sessions.
func TestDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	var names []string
	var leaked *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		pool := pgtest.NewPool(t)
		names = append(names, pool.Config().ConnConfig.Database)
		empty := pgtest.NewEmptyDB(t)
		names = append(names, dbName(t, empty))
		var err error
		leaked, err = pgx.Connect(context.Background(), empty) // not closed: DROP ... WITH (FORCE)
		require.NoError(t, err)
		for _, n := range names {
			assert.True(t, databaseExists(t, n), n)
		}
	})
	for _, n := range names {
		assert.False(t, databaseExists(t, n), "%s still exists", n)
	}
	if leaked != nil {
		leaked.Close(context.Background())
	}
}

// TestParallelNewPool: many parallel tests each get their own migrated database.
func TestParallelNewPool(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.schema_migrations").Scan(&n))
			assert.Equal(t, len(migrations.All()), n)
			mu.Lock()
			defer mu.Unlock()
			name := pool.Config().ConnConfig.Database
			assert.False(t, seen[name])
			seen[name] = true
		})
	}
}

func TestTemplateName(t *testing.T) {
	name := pgtest.TemplateName()
	assert.True(t, strings.HasPrefix(name, "tenure_tpl_"))
	assert.Equal(t, "tenure_tpl_"+migrations.Hash()[:12], name)
	pgtest.NewPool(t) // makes sure the template exists
	assert.True(t, databaseExists(t, name))
}
