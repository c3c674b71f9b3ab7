package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// catalogQueries describe every kind of object of schema tenure that a migration can
// create, each as sorted text lines, with the runner's own version table left out.
var catalogQueries = []struct{ kind, sql string }{
	{"relation", `
SELECT c.relname || ' kind=' || c.relkind::text || ' persistence=' || c.relpersistence::text
       || ' rls=' || c.relrowsecurity || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'tenure' AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S', 'c')
  AND c.relname NOT LIKE 'schema\_migrations%'`},
	{"column", `
SELECT c.relname || '.' || a.attname
       || ' pos=' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)
       || ' type=' || format_type(a.atttypid, a.atttypmod)
       || ' notnull=' || a.attnotnull
       || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '<none>')
       || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text
       || ' collation=' || coalesce((SELECT collname FROM pg_collation WHERE oid = a.attcollation AND a.attcollation <> t.typcollation), '<type default>')
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'tenure' AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
  AND a.attnum > 0 AND NOT a.attisdropped AND c.relname <> 'schema_migrations'`},
	{"sequence", `
SELECT c.relname || ' type=' || format_type(s.seqtypid, NULL) || ' start=' || s.seqstart
       || ' inc=' || s.seqincrement || ' min=' || s.seqmin || ' max=' || s.seqmax
       || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle
FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'tenure'`},
	{"constraint", `
SELECT coalesce(c.relname, 'type ' || t.typname) || '.' || k.conname || ' ' || k.contype::text
       || ' deferrable=' || k.condeferrable || ' deferred=' || k.condeferred
       || ' validated=' || k.convalidated || ' ' || pg_get_constraintdef(k.oid)
FROM pg_constraint k
JOIN pg_namespace n ON n.oid = k.connamespace
LEFT JOIN pg_class c ON c.oid = k.conrelid
LEFT JOIN pg_type t ON t.oid = k.contypid
WHERE n.nspname = 'tenure' AND coalesce(c.relname, '') <> 'schema_migrations'`},
	{"index", `
SELECT i.indexname || ' ' || i.indexdef
FROM pg_indexes i
WHERE i.schemaname = 'tenure' AND i.tablename <> 'schema_migrations'`},
	{"function", `
SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') kind=' || p.prokind::text
       || CASE WHEN p.prokind IN ('f', 'p') THEN E'\n' || pg_get_functiondef(p.oid) ELSE '' END
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'tenure'`},
	{"trigger", `
SELECT c.relname || '.' || g.tgname || ' enabled=' || g.tgenabled::text || ' ' || pg_get_triggerdef(g.oid)
FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'tenure' AND NOT g.tgisinternal`},
	{"type", `
SELECT t.typname || ' type=' || t.typtype::text
       || CASE t.typtype
            WHEN 'e' THEN ' labels=' || (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid)
            WHEN 'd' THEN ' base=' || format_type(t.typbasetype, t.typtypmod) || ' notnull=' || t.typnotnull
                          || ' default=' || coalesce(t.typdefault, '<none>')
            ELSE '' END
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = 'tenure'
  AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.typarray = t.oid)             -- implicit array types
  AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c') -- row types of tables`},
	{"view", `
SELECT c.relname || E'\n' || pg_get_viewdef(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'tenure' AND c.relkind IN ('v', 'm')`},
	{"policy", `
SELECT p.tablename || '.' || p.policyname || ' ' || p.permissive || ' ' || p.cmd
       || ' roles=' || array_to_string(p.roles, ',') || ' using=' || coalesce(p.qual, '') || ' check=' || coalesce(p.with_check, '')
FROM pg_policies p WHERE p.schemaname = 'tenure'`},
	{"comment", `
SELECT coalesce(c.relname, '') || coalesce('.' || a.attname, '') || ' ' || d.description
FROM pg_description d
JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.objsubid AND d.objsubid > 0
WHERE n.nspname = 'tenure' AND c.relname <> 'schema_migrations'
UNION ALL
SELECT 'function ' || p.proname || ' ' || d.description
FROM pg_description d JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND p.oid = d.objoid
JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'tenure'
UNION ALL
SELECT 'type ' || t.typname || ' ' || d.description
FROM pg_description d JOIN pg_type t ON d.classoid = 'pg_type'::regclass AND t.oid = d.objoid
JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'tenure'`},
}

// dumpCatalog returns a sorted, line-per-object description of schema tenure, without the
// migration runner's version table.
func dumpCatalog(t testing.TB, ctx context.Context, db querier) []string {
	t.Helper()
	var out []string
	for _, q := range catalogQueries {
		rows, err := db.Query(ctx, "SELECT line FROM ("+q.sql+"\n) AS x(line) ORDER BY line")
		require.NoError(t, err, "catalog query %s", q.kind)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err, "catalog query %s", q.kind)
		for _, l := range lines {
			out = append(out, fmt.Sprintf("%s: %s", q.kind, strings.TrimSpace(l)))
		}
	}
	return out
}
