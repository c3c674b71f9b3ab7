// Package jobs is Tenure's enqueue and operator side: typed inserts (one job, one job inside
// the caller's transaction so the business write and the job commit or roll back together —
// a pgx.Tx, or a database/sql transaction through SQLTx —, many jobs in one round trip, bulk
// loads by COPY with InsertManyFast), the read side (get, list with keyset paging), operator actions
// (cancel, re-inject dead jobs, prune) with an audit trail, and the statistics operators need
// (per queue and priority: ready/running/dead counts, oldest ready age, wait percentiles).
//
// Insert, InsertTx, InsertMany and InsertManyTx answer each job with an InsertResult: the
// stored row (generics.JobRow, the one public job type, which Get and List return too) and
// whether the job was a duplicate of a unique job. InsertManyFast and InsertManyFastTx, the
// COPY path for bulk loads that need neither rows nor uniqueness, return a count.
//
// Jobs that wait for other jobs (docs/guide.md §23-24): NewWorkflow builds a workflow of
// typed tasks with dependencies by name (fan-out, fan-in, diamonds; cycles and unknown names
// refused with a *WorkflowError), InsertWorkflowTx inserts it in the caller's transaction,
// Workflow reads it and CancelWorkflow cancels it, audited. InsertOpts.Sequence runs the jobs of
// one key one at a time, in insertion order. A waiting job is released in the transaction of
// the fenced finish of its last dependency.
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
