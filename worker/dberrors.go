package worker

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// writeClass is what the finish path does after a failed fenced write.
type writeClass int

const (
	writeRetry writeClass = iota // the same write may succeed later: retry it (bounded)
	writeData                    // the database refused a row (SQLSTATE 22, 23): split the batch
	writeFatal                   // a retry cannot help (schema, permissions, a bug): abandon
)

// classifyWriteError sorts a failed engine write. Errors without a server error code are
// network and connection failures (the server may or may not have run the statement: the
// caller reads the rows back after a retry). Server errors are retried when the condition is
// transient: connection exceptions (08), serialization failures and deadlocks (40), a server
// shutting down, restarting or in recovery (57P), too many connections or no disk (53), a lock
// not available (55P03) and a read-only server during a failover (25006).
func classifyWriteError(err error) writeClass {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		if errors.Is(err, context.Canceled) {
			return writeFatal
		}
		return writeRetry
	}
	code := pgErr.Code
	switch {
	case len(code) < 2:
		return writeFatal
	case code[:2] == "22" || code[:2] == "23":
		return writeData
	case code[:2] == "08" || code[:2] == "40" || code[:2] == "53" || code[:3] == "57P",
		code == "55P03", code == "25006":
		return writeRetry
	}
	return writeFatal
}

// stalePlan reports whether err is PostgreSQL refusing a prepared statement cached on the
// connection because a schema change altered its result type (a migration changed a column's
// type, or what * expands to): SQLSTATE 0A000, "cached plan must not change result type".
// Nothing ran. pgx has already dropped the statement from that connection's cache (it
// invalidates a cached statement on any error and deallocates it before the connection's
// next statement), so the same call prepares it afresh when run again.
func stalePlan(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "0A000" && strings.Contains(pgErr.Message, "cached plan must not change result type")
}

// retryStale runs fn, and again at once each time it fails with stalePlan. Every engine
// connection caches every statement, so after a schema change each connection refuses each
// affected statement once, and the retry may be handed another connection that still holds
// the stale statement; one call may run a few statements (a claim's pipeline: lock,
// completions, claim; the sweep's transaction), each refused at most once per connection: the
// bound is staleStatementsPerCall tries per connection of the engine pool, plus one.
// Without it a migration under load failed claims, heartbeats, finishes and sweeps, one
// connection after another, for as long as each took to come round (issue 29).
// fn must be safe to run again after a stalePlan error: the statement (or the transaction
// it was in) changed nothing.
func (w *Worker) retryStale(fn func() error) error {
	tries := 1
	if w.eng != nil {
		tries += staleStatementsPerCall * int(w.eng.Config().MaxConns)
	}
	for i := 1; ; i++ {
		err := fn()
		if err == nil || i >= tries || !stalePlan(err) {
			return err
		}
		w.m.stalePlanRetries.Add(1)
	}
}

// staleStatementsPerCall bounds the statements of one engine call that a schema change can
// make stale (retryStale).
const staleStatementsPerCall = 4
