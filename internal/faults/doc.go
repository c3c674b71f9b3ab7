// Package faults holds Tenure's fault-injection matrix (issue 11) as tests: PostgreSQL
// restarts and crashes, terminated backends, killed and stopped worker processes, network
// cuts and half-open connections, pool exhaustion, retry storms, held row locks, a read-only
// switch, least-privilege roles and a model-based test of the state machine. Everything runs
// against real PostgreSQL and real processes; see docs/reliability.md for the matrix.
//
// The tests are slow (minutes) and skip under -short; run them with `make chaos`.
package faults
