// Package plantest reads Tenure's statements from db/queries.sql (or, with NamesIn and SQLIn,
// from an integration module's own queries file) and explains them on a real server, so tests
// can check that each statement uses the index it was written for (the claim on
// jobs_ready_idx, pruning on jobs_finished_idx, ...). It is for tests only.
package plantest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/internal/engineconf"
)

// Node is one node of an EXPLAIN (FORMAT JSON) plan.
type Node struct {
	NodeType  string `json:"Node Type"`
	IndexName string `json:"Index Name"`
	Relation  string `json:"Relation Name"`
	Plans     []Node `json:"Plans"`
	SharedHit int64  `json:"Shared Hit Blocks"`
	SharedRd  int64  `json:"Shared Read Blocks"`
	// Arbiters are the indexes an INSERT ... ON CONFLICT checks (ModifyTable nodes only).
	Arbiters []string `json:"Conflict Arbiter Indexes"`
	// Function is the function a Function Scan reads ("own" for tenure.own).
	Function string `json:"Function Name"`
	// Loops is how many times the node ran (EXPLAIN ANALYZE only): an inner side of a nested
	// loop runs once per outer row.
	Loops int64 `json:"Actual Loops"`
	// IndexCond and Filter are the node's conditions as EXPLAIN prints them.
	IndexCond string `json:"Index Cond"`
	Filter    string `json:"Filter"`
}

// Nested is the plan of a statement run by a function the explained statement called (the
// UPDATE of tenure.own, every claim's ownership statement), as auto_explain logged it.
type Nested struct {
	Query string `json:"Query Text"`
	Plan  Node   `json:"Plan"`
}

// Buffers is the node's shared buffers hit and read (EXPLAIN ANALYZE, BUFFERS only).
func (n Node) Buffers() int64 { return n.SharedHit + n.SharedRd }

// Walk calls f for n and every node below it.
func Walk(n Node, f func(Node)) {
	f(n)
	for _, c := range n.Plans {
		Walk(c, f)
	}
}

// Indexes returns the names of the indexes the plan reads.
func Indexes(n Node) map[string]bool {
	out := map[string]bool{}
	Walk(n, func(n Node) {
		if n.IndexName != "" {
			out[n.IndexName] = true
		}
	})
	return out
}

// Arbiters returns the conflict arbiter indexes of every INSERT ... ON CONFLICT in the plan.
func Arbiters(n Node) []string {
	var out []string
	Walk(n, func(n Node) { out = append(out, n.Arbiters...) })
	return out
}

var paramRE = regexp.MustCompile(`sqlc\.n?arg\((\w+)\)|@(\w+)`)

// Names returns the names of every statement in db/queries.sql, in file order.
func Names(t testing.TB) []string {
	t.Helper()
	return names(t, coreQueries())
}

// NamesIn is Names for the sqlc queries file at path (relative to the test's directory, such
// as an integration module's internal/uidb/queries.sql).
func NamesIn(t testing.TB, path string) []string {
	t.Helper()
	return names(t, path)
}

func names(t testing.TB, path string) []string {
	t.Helper()
	var out []string
	for _, m := range nameRE.FindAllStringSubmatch(queriesText(t, path), -1) {
		out = append(out, m[1])
	}
	return out
}

var nameRE = regexp.MustCompile(`(?m)^-- name: (\w+) `)

// coreQueries is the path of db/queries.sql.
func coreQueries() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "db", "queries.sql")
}

func queriesText(t testing.TB, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("plantest: %v", err)
	}
	return string(raw)
}

// SQL returns the named statement of db/queries.sql with its sqlc parameters replaced by $n,
// and the parameter names in $n order.
func SQL(t testing.TB, name string) (string, []string) {
	t.Helper()
	return sqlOf(t, coreQueries(), name)
}

// SQLIn is SQL for the sqlc queries file at path (relative to the test's directory).
func SQLIn(t testing.TB, path, name string) (string, []string) {
	t.Helper()
	return sqlOf(t, path, name)
}

func sqlOf(t testing.TB, path, name string) (string, []string) {
	t.Helper()
	text := queriesText(t, path)
	start := strings.Index(text, "-- name: "+name+" ")
	if start < 0 {
		t.Fatalf("plantest: no statement %q in %s", name, path)
	}
	body := text[start:]
	body = body[strings.Index(body, "\n")+1:]
	if end := strings.Index(body, "-- name: "); end >= 0 {
		body = body[:end]
	}
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	body = strings.Join(lines, "\n")
	var order []string
	pos := map[string]int{}
	body = paramRE.ReplaceAllStringFunc(body, func(m string) string {
		sub := paramRE.FindStringSubmatch(m)
		n := sub[1] + sub[2]
		if _, ok := pos[n]; !ok {
			order = append(order, n)
			pos[n] = len(order)
		}
		return fmt.Sprintf("$%d", pos[n])
	})
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(body), ";")), order
}

// Explain returns the generic plan of sql (plan_cache_mode=force_generic_plan: what a
// prepared statement on any pool settles on). With analyze it runs the statement (EXPLAIN
// ANALYZE, BUFFERS) inside a transaction that is rolled back, so nothing it writes is kept.
func Explain(t testing.TB, pool *pgxpool.Pool, analyze bool, sql string, args ...any) Node {
	t.Helper()
	return explain(t, pool, analyze, map[string]string{"plan_cache_mode": "force_generic_plan"}, sql, args...)
}

// ExplainEngine is Explain under the settings of the worker's engine pool
// (internal/engineconf: a generic plan, sequential scans penalised), for the statements the
// engine runs on it (claims, finishes, heartbeats, the sweep).
func ExplainEngine(t testing.TB, pool *pgxpool.Pool, analyze bool, sql string, args ...any) Node {
	t.Helper()
	return explain(t, pool, analyze, engineconf.Settings, sql, args...)
}

func explain(t testing.TB, pool *pgxpool.Pool, analyze bool, settings map[string]string, sql string, args ...any) Node {
	t.Helper()
	opts := "FORMAT JSON"
	if analyze {
		opts = "ANALYZE, BUFFERS, FORMAT JSON"
	}
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("plantest: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for k, v := range settings {
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v); err != nil {
			t.Fatalf("plantest: %v", err)
		}
	}
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN ("+opts+") "+sql, args...).Scan(&out); err != nil {
		t.Fatalf("plantest: explain %s: %v", firstLine(sql), err)
	}
	var plans []struct {
		Plan Node `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) == 0 {
		t.Fatalf("plantest: plan does not decode: %v", err)
	}
	return plans[0].Plan
}

// ExplainNested runs sql (EXPLAIN ANALYZE, in a transaction it rolls back) under settings
// (nil: the engine's, internal/engineconf) on a connection of its own with auto_explain
// logging the plan of every statement run inside it, and returns the outer plan and the plans
// of the statements the functions it called ran (tenure.own's UPDATE). plan_cache_mode in
// settings applies to those too (PL/pgSQL keeps its statements in the plan cache). It loads
// auto_explain, so the pool's role must be a superuser (the test server's is).
func ExplainNested(t testing.TB, pool *pgxpool.Pool, settings map[string]string, sql string, args ...any) (Node, []Nested) {
	t.Helper()
	if settings == nil {
		settings = engineconf.Settings
	}
	ctx := context.Background()
	var logged []string
	cfg := pool.Config().ConnConfig.Copy()
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { logged = append(logged, n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("plantest: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("plantest: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOAD 'auto_explain'"); err != nil {
		t.Fatalf("plantest: load auto_explain: %v", err)
	}
	all := map[string]string{"auto_explain.log_min_duration": "0", "auto_explain.log_nested_statements": "on",
		"auto_explain.log_format": "json", "auto_explain.log_level": "notice",
		"auto_explain.log_analyze": "on", "auto_explain.log_timing": "off"}
	for k, v := range settings {
		all[k] = v
	}
	for k, v := range all {
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v); err != nil {
			t.Fatalf("plantest: %v", err)
		}
	}
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatalf("plantest: explain %s: %v", firstLine(sql), err)
	}
	var plans []struct {
		Plan Node `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) == 0 {
		t.Fatalf("plantest: plan does not decode: %v", err)
	}
	var nested []Nested
	for _, m := range logged {
		i := strings.IndexByte(m, '{')
		if i < 0 {
			continue
		}
		var n Nested
		if err := json.Unmarshal([]byte(m[i:]), &n); err != nil {
			t.Fatalf("plantest: auto_explain plan does not decode: %v", err)
		}
		if strings.HasPrefix(strings.TrimSpace(n.Query), "EXPLAIN") || strings.HasPrefix(strings.TrimSpace(n.Query), "SELECT set_config") {
			continue // the explained statement itself (its plan is the one returned), the settings
		}
		nested = append(nested, n)
	}
	return plans[0].Plan, nested
}

// OwnPlans checks that sql reaches the rows it owns through tenure.own (a Function Scan of
// own in the outer plan) and that the function's UPDATE reads them by primary key and through
// no other index under the engine's settings (generic plans), and without a sequential scan
// under them and with forced custom plans; it returns the outer plan of the engine's run.
func OwnPlans(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) Node {
	t.Helper()
	custom := map[string]string{}
	for k, v := range engineconf.Settings {
		custom[k] = v
	}
	custom["plan_cache_mode"] = "force_custom_plan"
	var first Node
	for i, settings := range []map[string]string{nil, custom} {
		outer, nested := ExplainNested(t, pool, settings, sql, args...)
		if i == 0 {
			first = outer
		}
		own := false
		Walk(outer, func(n Node) { own = own || (n.NodeType == "Function Scan" && n.Function == "own") })
		if !own {
			t.Fatalf("plantest: %s (%v): no Function Scan of tenure.own in the plan", firstLine(sql), settings)
		}
		updates := 0
		for _, n := range nested {
			if !strings.Contains(n.Query, "UPDATE tenure.jobs") {
				continue
			}
			updates++
			// The generic plan (the engine's) must look the ids up by primary key and through
			// no other index. A custom plan is made for the ids at hand: for none, the planner
			// proves the WHERE false and may name any (empty) partial index, so only the
			// sequential scan is checked there.
			idx := Indexes(n.Plan)
			if settings == nil && (len(idx) != 1 || !idx["jobs_pkey"]) {
				t.Fatalf("plantest: %s (%v): tenure.own's UPDATE does not read by primary key (uses %v)", firstLine(sql), settings, idx)
			}
			Walk(n.Plan, func(x Node) {
				if x.NodeType == "Seq Scan" && x.Relation == "jobs" {
					t.Fatalf("plantest: %s (%v): tenure.own's UPDATE scans the jobs table", firstLine(sql), settings)
				}
			})
		}
		if updates == 0 {
			t.Fatalf("plantest: %s (%v): auto_explain logged no UPDATE of tenure.own (logged %d plans)", firstLine(sql), settings, len(nested))
		}
	}
	return first
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
