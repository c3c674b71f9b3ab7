// Package jobs is Tenure's enqueue and operator side: typed inserts (one job, one job inside
// the caller's pgx.Tx so the business write and the job commit or roll back together, many
// jobs in one round trip, bulk loads by COPY with InsertManyFast), the read side (get, list with keyset paging), operator actions
// (cancel, re-inject dead jobs, prune) with an audit trail, and the statistics operators need
// (per queue and priority: ready/running/dead counts, oldest ready age, wait percentiles).
//
// Every statement comes from db/queries.sql through sqlc; the generated package is an
// implementation detail and never appears in this package's API.
//
// A client works in one schema, Config.Schema ("tenure" by default; docs/guide.md §22): its
// statements, NOTIFY channel and pruner lock are that schema's.
//
// An insert wakes idle workers of its queue through a NOTIFY sent inside the inserting
// transaction (so it fires only on commit); workers also poll, so a lost notification only
// costs latency, never a job.
package jobs
