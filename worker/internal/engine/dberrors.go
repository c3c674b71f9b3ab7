package engine

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// WriteClass is what the finish path does after a failed fenced write.
type WriteClass int

const (
	WriteRetry WriteClass = iota // the same write may succeed later: retry it (bounded)
	WriteData                    // the database refused a row (SQLSTATE 22, 23): split the batch
	WriteFatal                   // a retry cannot help (schema, permissions, a bug): abandon
)

// ClassifyWriteError sorts a failed engine write. Errors without a server error code are
// network and connection failures (the server may or may not have run the statement: the
// caller reads the rows back after a retry). Server errors are retried when the condition is
// transient: connection exceptions (08), serialization failures and deadlocks (40), a server
// shutting down, restarting or in recovery (57P), too many connections or no disk (53), a lock
// not available (55P03) and a read-only server during a failover (25006).
func ClassifyWriteError(err error) WriteClass {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		if errors.Is(err, context.Canceled) {
			return WriteFatal
		}
		return WriteRetry
	}
	code := pgErr.Code
	switch {
	case len(code) < 2:
		return WriteFatal
	case code[:2] == "22" || code[:2] == "23":
		return WriteData
	case code[:2] == "08" || code[:2] == "40" || code[:2] == "53" || code[:3] == "57P",
		code == "55P03", code == "25006":
		return WriteRetry
	}
	return WriteFatal
}

// StalePlan reports whether err is PostgreSQL refusing a prepared statement cached on the
// connection because a schema change altered its result type (a migration changed a column's
// type, or what * expands to): SQLSTATE 0A000, "cached plan must not change result type".
// Nothing ran. pgx has already dropped the statement from that connection's cache (it
// invalidates a cached statement on any error and deallocates it before the connection's
// next statement), so the same call prepares it afresh when run again.
func StalePlan(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "0A000" && strings.Contains(pgErr.Message, "cached plan must not change result type")
}

// IsPermissionError reports whether err is PostgreSQL's insufficient_privilege (SQLSTATE
// 42501): the role lacks a grant, which no retry fixes.
func IsPermissionError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}
