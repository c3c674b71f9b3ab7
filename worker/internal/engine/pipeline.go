package engine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/dbschema"
)

// Pipelines: statements the engine sends together in one round trip and one implicit
// transaction (AfterLock), their texts captured from the generated code (Capture) so that
// every statement stays in db/queries.sql. The claims of limited queues (worker/limits.go) lock
// their groups' stripes first, a permit claim its share (worker/permits.go); completions ride
// on claims (worker/claim.go, rideOn); the claim batcher turns bitmap scans off for its
// statement (worker/claimbatch.go).

// LockedStatement is a statement the generated code would run, captured instead.
type LockedStatement struct {
	SQL  string
	Args []any
}

// LockStatement captures ClaimLimitsLock's text and arguments from the generated code, so the
// statement stays in db/queries.sql.
func LockStatement(ctx context.Context, queue string, first, last int32) LockedStatement {
	var c Capture
	_ = gen.New(&c).ClaimLimitsLock(ctx, gen.ClaimLimitsLockParams{Queue: queue, FirstClass: first, LastClass: last})
	return LockedStatement{c.SQL, c.Args}
}

// Capture is a gen.DBTX that records the one statement it is given (Exec or Query).
type Capture struct {
	SQL  string
	Args []any
}

func (c *Capture) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.SQL, c.Args = sql, args
	return pgconn.CommandTag{}, nil
}
func (c *Capture) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.SQL, c.Args = sql, args
	return nil, errCaptured
}

// errCaptured is what a captured query returns to the generated code (which then returns it).
var errCaptured = errors.New("tenure: statement captured, not run")

func (c *Capture) QueryRow(context.Context, string, ...any) pgx.Row { return nil }

// Batcher is what AfterLock needs of a pool.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// AfterLock is a gen.DBTX whose Query sends the lock statement and the query in one batch:
// one round trip, one implicit transaction (pgx sends a single Sync), the query's snapshot
// taken after the lock was granted. The returned rows end the batch (commit) when they are
// exhausted, and report a failed commit as their error.
type AfterLock struct {
	Pool Batcher
	// Sch is the worker's schema: every statement of the batch (the captured ones and the
	// query) is rewritten for it, as Sch.Wrap would.
	Sch   *dbschema.Schema
	Locks []LockedStatement // sent in order before the query
	// Pre are statements sent in order after the locks and before the query (same
	// transaction), each with a function that reads its rows: a permit allocation
	// (permits.go), the completions riding on a claim (claim.go, rideOn).
	Pre []PreStatement
}

// PreStatement is a captured statement whose rows the pipeline hands to Rows.
type PreStatement struct {
	LockedStatement
	Rows func(pgx.Rows) error
}

func (a *AfterLock) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("tenure: AfterLock supports Query only")
}
func (a *AfterLock) QueryRow(context.Context, string, ...any) pgx.Row { return nil }

func (a *AfterLock) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	for _, l := range a.Locks {
		b.Queue(a.Sch.Rewrite(l.SQL), l.Args...)
	}
	for _, p := range a.Pre {
		b.Queue(a.Sch.Rewrite(p.SQL), p.Args...)
	}
	b.Queue(a.Sch.Rewrite(sql), args...)
	br := a.Pool.SendBatch(ctx, b)
	for range a.Locks {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	for _, p := range a.Pre {
		rows, err := br.Query()
		if err == nil {
			err = p.Rows(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows closes the batch (the implicit transaction's commit) when the rows end.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}
