package migrations_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/internal/pgtest"
)

func runner(t *testing.T, schema string) *migrations.Runner {
	t.Helper()
	r, err := migrations.NewRunner(migrations.Options{Schema: schema})
	require.NoError(t, err)
	require.Equal(t, schema, r.Schema())
	return r
}

// schemaObjects lists what schema holds: relations (with kind), functions (with arguments),
// types and constraints (with their definitions, the schema's name written as tenure), so two
// schemas migrated by the same migrations can be compared.
func schemaObjects(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(ctx, `
SELECT 'rel ' || c.relkind::text || ' ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
UNION ALL
SELECT 'fn ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
UNION ALL
SELECT 'type ' || t.typtype::text || ' ' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = $1
UNION ALL
SELECT 'con ' || c.conname || ' ' || pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1`, schema)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		// Definitions name the schema they refer to: compare them as if it were tenure.
		out = append(out, strings.ReplaceAll(s, schema+".", "tenure."))
	}
	require.NoError(t, rows.Err())
	sort.Strings(out)
	return out
}

func applied(t *testing.T, ctx context.Context, r *migrations.Runner, pool *pgxpool.Pool) int {
	t.Helper()
	st, err := r.Status(ctx, pool)
	require.NoError(t, err)
	n := 0
	for _, s := range st {
		require.False(t, s.Unknown)
		if s.Applied {
			n++
		}
	}
	return n
}

// TestSchemasMigrateIndependently migrates schemas tenure and app2 in one database: each holds
// the same objects, and Status, Down and Up of app2 leave tenure as it was.
func TestSchemasMigrateIndependently(t *testing.T) {
	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewEmptyDB(t), 4)
	def, app2 := runner(t, "tenure"), runner(t, "app2")
	require.NotEqual(t, def.LockKey(), app2.LockKey())
	require.Equal(t, migrations.LockKey, def.LockKey(), "the default schema keeps its lock key")
	require.Equal(t, migrations.VersionTable, def.VersionTable())
	require.Equal(t, "app2.schema_migrations", app2.VersionTable())

	all := len(migrations.All())
	_, err := migrations.Up(ctx, pool) // the simple call is the default runner
	require.NoError(t, err)
	require.Zero(t, applied(t, ctx, app2, pool), "app2 is not migrated by the default runner")
	got, err := app2.Up(ctx, pool)
	require.NoError(t, err)
	require.Len(t, got, all)
	require.Equal(t, all, applied(t, ctx, def, pool))
	require.Equal(t, all, applied(t, ctx, app2, pool))
	require.NoError(t, app2.Check(ctx, pool))

	tenureObjs := schemaObjects(t, ctx, pool, "tenure")
	require.Greater(t, len(tenureObjs), 50)
	require.Equal(t, tenureObjs, schemaObjects(t, ctx, pool, "app2"), "both schemas hold the same objects")

	// The function bodies name their own schema: app2's enqueue inserts into app2.jobs.
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM app2.enqueue('k', '{}'::jsonb)`).Scan(&id))
	var inApp2, inTenure int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM app2.jobs), (SELECT count(*) FROM tenure.jobs)`).Scan(&inApp2, &inTenure))
	require.Equal(t, 1, inApp2)
	require.Zero(t, inTenure)

	// A migration run on app2 does not wait for tenure's lock.
	holder, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrations.LockKey)
	require.NoError(t, err)
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	reverted, err := app2.Down(lctx, pool, all)
	cancel()
	require.NoError(t, err, "app2's runner must not take tenure's lock")
	require.Len(t, reverted, all)
	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrations.LockKey)
	require.NoError(t, err)

	require.Zero(t, applied(t, ctx, app2, pool))
	require.Empty(t, filterTables(schemaObjects(t, ctx, pool, "app2")), "app2 down to zero keeps only its version table")
	require.Equal(t, all, applied(t, ctx, def, pool), "tenure untouched by app2's Down")
	require.Equal(t, tenureObjs, schemaObjects(t, ctx, pool, "tenure"), "tenure untouched by app2's Down")

	_, err = app2.Up(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, tenureObjs, schemaObjects(t, ctx, pool, "app2"))
	reverted, err = migrations.Down(ctx, pool, all)
	require.NoError(t, err)
	require.Len(t, reverted, all)
	require.Equal(t, all, applied(t, ctx, app2, pool), "app2 untouched by tenure's Down")
	require.Equal(t, tenureObjs, schemaObjects(t, ctx, pool, "app2"))
}

// filterTables drops the version table's own objects from objs.
func filterTables(objs []string) []string {
	var out []string
	for _, o := range objs {
		switch o {
		case "rel r schema_migrations", "rel i schema_migrations_pkey", "type c schema_migrations", "type b _schema_migrations",
			"con schema_migrations_pkey PRIMARY KEY (version)":
			continue
		}
		out = append(out, o)
	}
	return out
}

// generatedFiles are sqlc's outputs: the core's db/gen and the integrations' own packages.
var generatedFiles = []string{
	filepath.Join("..", "gen", "queries.sql.go"),
	filepath.Join("..", "..", "tenureui", "internal", "uidb", "queries.sql.go"),
	filepath.Join("..", "..", "tenureprom", "internal", "promdb", "queries.sql.go"),
	filepath.Join("..", "..", "tenurenats", "internal", "natsdb", "queries.sql.go"),
}

// generatedStatements returns every query constant of the generated packages
// (generatedFiles), by package and name.
func generatedStatements(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, file := range generatedFiles {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		addConsts(t, f, out)
	}
	return out
}

func addConsts(t *testing.T, f *ast.File, out map[string]string) {
	t.Helper()
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out[f.Name.Name+"."+n.Name] = v
			}
		}
	}
}

// TestOnlyAnotherSchema migrates schema alt into a database that has no schema tenure, and
// prepares every generated statement (db/gen and the integrations' packages) rewritten for alt there: a statement still naming tenure
// (a table, a function, a type) fails to prepare.
func TestOnlyAnotherSchema(t *testing.T) {
	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewEmptyDB(t), 2)
	alt := runner(t, "alt")
	_, err := alt.Up(ctx, pool)
	require.NoError(t, err)
	var tenureSchemas int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'tenure'`).Scan(&tenureSchemas))
	require.Zero(t, tenureSchemas, "migrating alt created schema tenure")
	require.NoError(t, alt.Check(ctx, pool))
	require.ErrorIs(t, migrations.Check(ctx, pool), migrations.ErrNotMigrated, "the default schema is not migrated here")

	stmts := generatedStatements(t)
	require.Greater(t, len(stmts), 80)
	s := dbschema.Must("alt")
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for name, sql := range stmts {
		_, err := conn.Conn().Prepare(ctx, "", s.Rewrite(sql))
		require.NoError(t, err, "%s does not prepare in a database with only schema alt", name)
	}

	// The grant functions grant on their own schema.
	role := pgtest.NewRole(t, pool)
	rows, err := pool.Query(ctx, `SELECT s FROM alt.grant_operator($1) AS s`, role)
	require.NoError(t, err)
	grants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, stmt := range grants {
		require.NotRegexp(t, `SCHEMA tenure|tenure\.`, stmt)
		require.Regexp(t, `(SCHEMA alt|ON alt\.[a-z_]+) TO`, stmt)
	}
	require.Greater(t, len(grants), 10)

	// A Tenure object missing in alt is recognized as not migrated (the one hint).
	_, err = pool.Exec(ctx, s.Rewrite(`SELECT count(*) FROM tenure.no_such_table`))
	require.ErrorIs(t, migrations.WrapNotMigrated(err), migrations.ErrNotMigrated)
}

// TestInvalidSchemaRefused: the runner refuses names that are not plain lower-case
// identifiers, and every PostgreSQL keyword that cannot name a schema unquoted (the server's
// own list).
func TestInvalidSchemaRefused(t *testing.T) {
	for _, bad := range []string{"App", "1x", "a-b", "a.b", `a"b`, "a;b", "public", "pg_x", "information_schema", "select"} {
		_, err := migrations.NewRunner(migrations.Options{Schema: bad})
		require.ErrorIs(t, err, migrations.ErrInvalidSchema, bad)
		var ie *migrations.InvalidSchemaError
		require.True(t, errors.As(err, &ie), bad)
		require.Equal(t, bad, ie.Name)
	}
	r, err := migrations.NewRunner(migrations.Options{})
	require.NoError(t, err)
	require.Equal(t, migrations.DefaultSchema, r.Schema())

	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewEmptyDB(t), 1)
	rows, err := pool.Query(ctx, `SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T')`)
	require.NoError(t, err)
	var n int
	for rows.Next() {
		var w string
		require.NoError(t, rows.Scan(&w))
		require.ErrorIs(t, dbschema.Validate(w), dbschema.ErrInvalid, "keyword %q", w)
		n++
	}
	require.NoError(t, rows.Err())
	require.Greater(t, n, 50)
}
