// Package tenure is the root of the Tenure module: a PostgreSQL-backed background job queue
// with typed jobs, fenced completions, leases with heartbeats, fair priorities and an effect
// ledger. The code lives in the sub-packages:
//
//   - generics: job args types, Job[Args], payload versions and the kind registry;
//   - jobs: enqueue (one, in a transaction, many), read side, operator actions, stats;
//   - worker: the engine (claim, heartbeat, fenced finish, reclaim, fairness, effects);
//   - db/migrations: the embedded schema migrations;
//   - cron: cron expressions for periodic jobs; tenuretest: helpers for your tests;
//   - cmd/tenuregen: the code generator.
//
// The CLI (cmd/tenure) and the integrations (tenureprom, tenureotel, tenureui, tenurenats) are
// modules of their own, so this module requires only pgx, uuid, golang.org/x/... and testify.
// See README.md and docs/ (the layout: docs/design.md).
package tenure
