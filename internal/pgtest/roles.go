package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// NewRole creates a login role with a unique name on the test server (roles are cluster-wide),
// runs each of setup in pool's database as the pool's user (a superuser that owns schema
// tenure) with {role} replaced by the role's name (lower-case letters, digits and underscores:
// it needs no quoting) — for example "SELECT tenure.grant_worker('{role}')" or
// "GRANT SELECT ON tenure.jobs TO {role}" — and
// returns the role's name. When the test ends, after the pools RolePool opened are closed, the
// role's privileges in that database are dropped and the role with them.
func NewRole(t testing.TB, pool *pgxpool.Pool, setup ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("tenure_role_%d_%s", os.Getpid(), randomHex(4))
	if _, err := pool.Exec(ctx, "CREATE ROLE "+quoteIdent(name)+" LOGIN"); err != nil {
		t.Fatalf("pgtest: creating role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, s := range []string{"DROP OWNED BY " + quoteIdent(name), "DROP ROLE " + quoteIdent(name)} {
			if _, err := pool.Exec(ctx, s); err != nil {
				t.Errorf("pgtest: %s: %v", s, err)
				return
			}
		}
	})
	for _, s := range setup {
		q := strings.ReplaceAll(s, "{role}", name)
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("pgtest: role setup %q: %v", q, err)
		}
	}
	return name
}

// RolePool opens a pool (MaxConns conns) on pool's database that logs in as role (the test
// server trusts local connections). It is closed when the test ends.
func RolePool(t testing.TB, pool *pgxpool.Pool, role string, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config().Copy()
	cfg.ConnConfig.User = role
	cfg.ConnConfig.Password = ""
	cfg.MaxConns = conns
	cfg.MinConns = 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: pool as %s: %v", role, err)
	}
	t.Cleanup(p.Close)
	return p
}
