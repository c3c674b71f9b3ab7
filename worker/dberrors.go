package worker

import (
	"context"
	"errors"

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
