// Package locks is the one place that lists every PostgreSQL advisory lock key Tenure uses.
// Advisory locks share one key space per database (and pg_advisory_lock and
// pg_advisory_xact_lock share it too), so two purposes on one key silently exclude each other:
// before this package the pruner and the migration runner both used 0x74656e7572650001, so a
// prune was skipped while migrations ran and a migration waited behind a prune.
//
// Every key is the ASCII bytes "tenure" (0x74656e757265) followed by a 16-bit number:
//
//	key                  constant   scope                   held by
//	0x74656e7572650001   Migrate    session (one conn)      db/migrations runner, whole Up/Down run
//	0x74656e7572650002   Template   session, admin database internal/pgtest, building the test template
//	0x74656e7572650003   Prune      session (one conn)      jobs.Client.PruneExpired, one pruner at a time
//	0x74656e7572650004   FlowPrune  transaction (try)       worker FlowPrune steps, one flow pruner at a time
//
// More locks live in the separate two-int4 key space (pg_advisory_xact_lock(int4, int4), which
// never matches a bigint key): (LimitsClass+s, hashtext(queue)) for the queue's limit stripes
// s = 0..3, transaction scope, held by every limited claim of the queue (worker/limits.go) from
// before it counts until its commit: one stripe by a striped claim, all four by an exclusive one;
// and (FinishWaitClass, hashint8(job id)), transaction scope, held by a finish waiting for
// another session's lock on the job's row (worker/finish.go finishLocked), probed by the sweep.
//
// Migrate keeps its historical value (a running older binary must still exclude a newer one
// that migrates the same database); the pruner moved to a key of its own. A new lock gets the
// next number, a row in the table above and an entry in All; TestKeysAreDistinct fails
// otherwise. Applications must not use keys starting with 0x74656e757265.
package locks

// Key is a PostgreSQL advisory lock key (the bigint form of pg_advisory_lock and friends).
type Key int64

const (
	// Migrate serializes migration runs (db/migrations.LockKey).
	Migrate Key = 0x74656e7572650001
	// Template serializes test-template builds on the admin database (internal/pgtest).
	Template Key = 0x74656e7572650002
	// Prune elects one pruner of final jobs at a time across processes.
	Prune Key = 0x74656e7572650003
	// FlowPrune elects one pruner of tenure.flow rows at a time (each FlowPrune statement
	// try-locks it for its transaction; worker/limits.go).
	FlowPrune Key = 0x74656e7572650004
)

// FinishWaitClass is the first int4 of the lock a finish waiting for another session's row
// lock holds for its transaction (pg_advisory_xact_lock(FinishWaitClass, hashint8(job id)),
// db/queries.sql LockFinish, written there as 1952804473); the sweep (LockExpired) probes it
// and leaves such a row to the finish. "tenu" + 4, past LimitsClass's four stripes. Two jobs
// whose ids hash alike share it, which only makes a sweep skip a row once more.
const FinishWaitClass int32 = 0x74656e79

// LimitsClass is the first int4 of the limited claims' stripe locks
// (pg_advisory_xact_lock(LimitsClass+stripe, hashtext(queue)), stripes 0..3): "tenu" in ASCII.
// Two queues whose names hash alike share the stripes, which only serializes their claims more.
const LimitsClass int32 = 0x74656e75

// Named is a key with the name of its constant.
type Named struct {
	Name string
	Key  Key
}

// All returns every key Tenure uses, in the order of the table in the package comment.
func All() []Named {
	return []Named{{"Migrate", Migrate}, {"Template", Template}, {"Prune", Prune}, {"FlowPrune", FlowPrune}}
}
