package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5/pgxpool"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrPermission is returned (wrapped in a *PermissionError) by Start when the engine's database
// role lacks a privilege the worker's configuration needs: a worker started without it would
// run, fail every statement that touches the table, and leave its queues stuck. Grant the role
// what a worker needs with SELECT tenure.grant_worker('role') as the owner of schema tenure
// (migration 0017; docs/guide.md §10). Test for it with errors.Is.
var ErrPermission = errors.New("tenure: the database role lacks privileges the worker needs")

// PermissionError lists what the engine's database role lacks. It unwraps to ErrPermission.
type PermissionError struct {
	// Role is the role the engine's statements run as (current_user).
	Role string
	// Missing lists each missing privilege as "PRIVILEGE on object (what needs it)", in the
	// order Start checked them.
	Missing []string
	// Schema is the worker's schema (Config.Schema); "" means "tenure".
	Schema string
}

// Error names every missing privilege and the function that grants them.
func (e *PermissionError) Error() string {
	schema := e.Schema
	if schema == "" {
		schema = "tenure"
	}
	return fmt.Sprintf("%v: role %q lacks %s; as the owner of schema %s run: SELECT %s.grant_worker(%s)",
		ErrPermission, e.Role, strings.Join(e.Missing, "; "), schema, schema, quoteLiteral(e.Role))
}

// Unwrap returns ErrPermission.
func (e *PermissionError) Unwrap() error { return ErrPermission }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tablePrivilege is one privilege the engine's statements need on a table of schema tenure.
type tablePrivilege struct {
	table, privilege, why string
}

// neededPrivileges lists the table privileges this worker's engine uses with its
// configuration (the statements of db/queries.sql it runs). tenure.grant_worker grants every
// one of them; TestGrantWorkerCoversStartCheck keeps the two in step.
func (w *Worker) neededPrivileges() []tablePrivilege {
	var out []tablePrivilege
	add := func(table, why string, privs ...string) {
		for _, p := range privs {
			out = append(out, tablePrivilege{table, p, why})
		}
	}
	add("schema_migrations", "Start checks the schema version", "SELECT")
	add("jobs", "claims, heartbeats, finishes, reclaim", "SELECT", "UPDATE")
	add("effects", "worker.Effect's ledger", "SELECT", "INSERT", "UPDATE")
	add("job_deps", "finishes release workflow and sequence dependents", "SELECT", "UPDATE")
	add("job_dep_stripes", "finishes count down large fan-ins (striped joins)", "SELECT", "UPDATE")
	add("queues", "queue pause", "SELECT")
	// The flow prune runs every PruneEvery over every queue served (limits.go), limits or not.
	add("flow", "the flow prune", "SELECT", "UPDATE", "DELETE")
	if w.cfg.FinishedRetention >= 0 || w.cfg.DeadRetention >= 0 {
		add("jobs", "retention pruning", "DELETE")
		add("effects", "retention pruning", "DELETE")
		add("job_deps", "retention pruning", "DELETE")
		add("job_dep_stripes", "retention pruning", "DELETE")
		add("sequences", "retention pruning", "SELECT", "UPDATE", "DELETE") // UPDATE: its row locks
		add("workflows", "retention pruning", "SELECT", "DELETE")
	}
	if w.cfg.RegistryEvery > 0 {
		add("workers", "the worker registry", "SELECT", "INSERT", "UPDATE", "DELETE")
	}
	// Kind defaults are published at Start and with each registry heartbeat (registry.go).
	add("kinds", "publishing kind defaults", "SELECT", "INSERT", "UPDATE", "DELETE")
	if w.cfg.RegistryEvery <= 0 { // else the registry's line covers it
		add("workers", "publishing kind defaults", "SELECT")
	}
	if len(w.cfg.Periodic) > 0 {
		add("periodic", "periodic schedules", "SELECT", "INSERT", "UPDATE")
		add("jobs", "periodic schedules", "INSERT")
	}
	var limited []string
	for name, q := range w.cfg.Queues {
		if len(q.Limits) > 0 {
			limited = append(limited, name)
		}
	}
	if len(limited) > 0 {
		slices.Sort(limited)
		why := "Limits of queue(s) " + strings.Join(limited, ", ")
		add("flow", why, "INSERT")
		// flow_grant: no statement uses it since grant claims were retired (issue 28, limits.go);
		// tenure.grant_worker still grants it and Start still checks it, so the two agree
		// (TestGrantWorkerCoversStartCheck), until a migration drops the table.
		add("flow_grant", why, "SELECT", "INSERT", "UPDATE")
		add("flow_permit", why, "SELECT", "INSERT", "UPDATE", "DELETE")
	}
	return out
}

// checkPrivileges makes Start fail with a *PermissionError when the engine's role (its
// current_user) lacks USAGE on schema tenure or a privilege of neededPrivileges. Tables that do
// not exist yet are left to the schema version check.
func (w *Worker) checkPrivileges(ctx context.Context, eng *pgxpool.Pool) error {
	need := w.neededPrivileges()
	tables, privs := make([]string, len(need)), make([]string, len(need))
	for i, p := range need {
		tables[i], privs[i] = p.table, p.privilege
	}
	var role string
	var usage bool
	if err := eng.QueryRow(ctx, `SELECT current_user::text, has_schema_privilege(n.oid, 'USAGE')
		FROM pg_namespace n WHERE n.nspname = $1`, w.sch.Name()).Scan(&role, &usage); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // no schema tenure: the schema version check reports it
		}
		return fmt.Errorf("tenure: start: reading the role's privileges: %w", err)
	}
	var missing []string
	if !usage {
		missing = append(missing, "USAGE on schema "+w.sch.Name())
	}
	// By oid from the catalogs (readable by every role), so a missing USAGE does not turn
	// the look-up itself into a permission error.
	rows, err := eng.Query(ctx, `SELECT has_table_privilege(c.oid, x.priv)
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(tbl, priv, ord)
		LEFT JOIN pg_namespace n ON n.nspname = $3
		LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = x.tbl AND c.relkind IN ('r', 'p')
		ORDER BY x.ord`, tables, privs, w.sch.Name())
	if err != nil {
		return fmt.Errorf("tenure: start: reading the role's privileges: %w", err)
	}
	has, err := pgx.CollectRows(rows, pgx.RowTo[*bool])
	if err != nil {
		return fmt.Errorf("tenure: start: reading the role's privileges: %w", err)
	}
	// One entry per table and reason: "SELECT, INSERT on tenure.flow_grant (why)".
	var last *tablePrivilege
	var privList []string
	flush := func() {
		if last != nil {
			missing = append(missing, strings.Join(privList, ", ")+" on "+w.sch.Qualify(last.table)+" ("+last.why+")")
		}
		last, privList = nil, nil
	}
	for i, h := range has {
		if h == nil || *h {
			continue // granted, or no such table (the schema version check reports it)
		}
		p := &need[i]
		if last != nil && (last.table != p.table || last.why != p.why) {
			flush()
		}
		last, privList = p, append(privList, p.privilege)
	}
	flush()
	if len(missing) > 0 {
		return &PermissionError{Role: role, Missing: missing, Schema: w.sch.Name()}
	}
	return nil
}
