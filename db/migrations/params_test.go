package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
)

// TestStatementsBindBaseTypes prepares every statement of db/queries.sql, and of the
// integration modules' own queries files, on the migrated schema and fails when PostgreSQL
// types one of its parameters as one of Tenure's domains (a parameter bound straight to a
// column of tenure.jobs, such as VALUES (@payload)). The server would then describe that
// parameter by the domain's OID, which pgx does not know: it encodes a []byte as bytea text
// and the insert fails ("invalid input syntax for type json"). Every such parameter is cast to
// the domain's base type in the statement.
func TestStatementsBindBaseTypes(t *testing.T) {
	ctx := ctxT(t)
	pool := openPool(t, pgtest.NewMigratedDB(t), 1)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	domains := map[uint32]string{}
	rows, err := conn.Query(ctx, `SELECT t.oid, t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		WHERE n.nspname = 'tenure' AND t.typtype = 'd'`)
	require.NoError(t, err)
	for rows.Next() {
		var oid uint32
		var name string
		require.NoError(t, rows.Scan(&oid, &name))
		domains[oid] = name
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, domains, "the schema defines the jobs table's domains")

	check := func(file, name, sql string, params []string) {
		t.Helper()
		sd, err := conn.Conn().Prepare(ctx, "", sql)
		require.NoError(t, err, "%s: %s", file, name)
		for i, oid := range sd.ParamOIDs {
			if d, ok := domains[oid]; ok {
				t.Errorf("%s: %s: parameter @%s is typed as domain tenure.%s: cast it to the base type", file, name, params[i], d)
			}
		}
	}
	names := plantest.Names(t)
	require.Greater(t, len(names), 50)
	for _, name := range names {
		sql, params := plantest.SQL(t, name)
		check("db/queries.sql", name, sql, params)
	}
	// The integration modules' own statements (sqlc.yaml) run on the same schema.
	for _, file := range integrationQueries {
		names := plantest.NamesIn(t, file)
		require.NotEmpty(t, names, file)
		for _, name := range names {
			sql, params := plantest.SQLIn(t, file, name)
			check(file, name, sql, params)
		}
	}
}

// integrationQueries are the queries files of the integration modules' own sqlc packages,
// relative to this directory.
var integrationQueries = []string{
	"../../tenureui/internal/uidb/queries.sql",
	"../../tenureprom/internal/promdb/queries.sql",
	"../../tenurenats/internal/natsdb/queries.sql",
}
