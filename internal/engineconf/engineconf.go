// Package engineconf holds the session settings of the worker's private engine pool, so that
// the engine (worker.Start) and the plan tests (internal/plantest) plan its statements alike.
package engineconf

// Settings are the run-time parameters of every engine connection.
//
//   - plan_cache_mode=force_generic_plan: the engine's statements run thousands of times a
//     second and are written to plan well generically (primary-key lookups, partial-index
//     ranges); re-planning each execution would cost more PostgreSQL CPU than running it, at
//     low load where a claim takes one job at a time.
//   - enable_seqscan=off: a generic plan is built once per connection and kept until the
//     table's statistics change. Built while tenure.jobs holds a few dozen rows (a new
//     deployment, a drained queue, a test), it reads the claimed rows by a sequential scan,
//     and keeps doing so as the table grows to millions of rows (measured: a claim of one job
//     reading 1,700–3,600 buffers instead of 32). Every engine statement has an index path;
//     this makes the planner take it at any size. Statements on tables without one (the
//     small registry tables) still scan them: the setting only penalises the choice.
//   - jit=off: the engine's statements take well under a millisecond; a generic plan whose
//     row estimates are loose (array parameters, set-returning functions: the fair claim's
//     estimated cost reached 10^10 on a table of 400 rows) crosses jit_above_cost, and the
//     server then spends 1–2 s compiling the statement on every execution (measured with
//     EXPLAIN ANALYZE: JIT 1,919 ms of a 2,007 ms fair claim; ClaimLimited's ranked form 490 ms
//     of ~500; RegisterWorker, every 5 s per worker, 0.35–0.75 s per call in
//     pg_stat_statements of the scaling soak). JIT pays off for long analytical queries, never
//     for these.
var Settings = map[string]string{
	"plan_cache_mode": "force_generic_plan",
	"enable_seqscan":  "off",
	"jit":             "off",
}
