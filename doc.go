// Package tenure is the root of the Tenure module: a PostgreSQL-backed background job queue
// with typed jobs, fenced completions, leases with heartbeats, fair priorities and an effect
// ledger. The code lives in the sub-packages:
//
//   - generics: job args types, Job[Args], payload versions and the kind registry;
//   - jobs: enqueue (one, in a transaction, many), read side, operator actions, stats;
//   - worker: the engine (claim, heartbeat, fenced finish, reclaim, fairness, effects);
//   - db/migrations: the embedded schema migrations;
//   - cmd/tenure: the CLI; cmd/tenuregen: the code generator.
//
// See README.md and docs/.
package tenure
