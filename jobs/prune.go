package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/locks"
)

// Pruning defaults and bounds.
const (
	// DefaultPruneBatch is PruneParams.BatchSize's default: rows per statement and class.
	DefaultPruneBatch = 10000
	// DefaultPruneBudget is PruneParams.Budget's default.
	DefaultPruneBudget = 30 * time.Second
	maxPruneBatch      = 100000
)

// pruneFloor is the lower finish-time bound of a class's first batch: earlier than any
// finished_at the database can have written (now() at finish).
var pruneFloor = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)

// PruneParams configures PruneExpired.
type PruneParams struct {
	// FinishedBefore: succeeded and cancelled jobs finished before it are deleted. The zero
	// time skips this class.
	FinishedBefore time.Time
	// DeadBefore: dead jobs finished before it are deleted. The zero time skips this class.
	DeadBefore time.Time
	// BatchSize is the most rows one statement deletes per class, 1..100000. Each batch is
	// its own short transaction. Default DefaultPruneBatch.
	BatchSize int
	// Budget bounds the call: no batch starts once Budget has passed since the call began (the
	// one in flight finishes, so the call can overrun by one batch). Default
	// DefaultPruneBudget; the first batch of each class always runs.
	Budget time.Duration
}

// PruneResult says what PruneExpired did.
type PruneResult struct {
	// Finished and Dead count the jobs deleted per class (Finished: succeeded and cancelled).
	Finished, Dead int64
	// Effects counts the effect-ledger rows of those jobs deleted with them.
	Effects int64
	// Sequences counts the rows of tenure.sequences deleted: sequences (InsertOpts.Sequence)
	// with no job left.
	Sequences int64
	// Workflows counts the rows of tenure.workflows deleted: workflows with no task left,
	// whose ids may be used again (migration 0031).
	Workflows int64
	// Batches is the number of job batch statements run (the sequences' batches are not
	// counted).
	Batches int
	// Drained is true when every class ended on a batch that came back short: nothing more
	// was due (rows locked by other transactions are skipped and left for the next call).
	// False when the budget or ctx ended the call first.
	Drained bool
	// Skipped is true when another process was pruning (it held locks.Prune): nothing was done.
	Skipped bool
}

// PruneExpired deletes final jobs past their retention, and the effect-ledger rows of exactly
// those jobs, in batches of BatchSize per class (succeeded+cancelled, dead), each batch one
// autocommitted statement, alternating between the classes until both come back short, the
// Budget is spent or ctx ends. No audit row is written (routine housekeeping, not an operator
// action). Once the jobs are drained it deletes, in batches of BatchSize keys, the
// tenure.sequences rows of sequences whose last job is gone (pruned or deleted), so that the
// table holds only sequences with a job left; a later insert into such a key starts it again,
// as it would have (a missing previous job is none). Then, the same way, it deletes the
// tenure.workflows rows of workflows with no task left (their ids are free again). It needs
// SELECT and DELETE on tenure.sequences (tenure.grant_worker, migration 0023) and on
// tenure.workflows (migration 0031).
//
// One pruner runs at a time across processes: the call takes the session-level advisory lock
// locks.Prune with pg_try_advisory_lock on one connection it holds for the whole loop and
// runs every batch on that connection; if another session holds the lock it returns at once
// with Skipped set. (A transaction-level lock would have to be held by one long transaction
// across all batches, which is what this replaces.) The lock is released before returning;
// if releasing fails, the connection is closed, which releases it. Through a pooler in
// transaction mode (PgBouncer) session locks do not work; connect the pruner directly.
//
// The counts in the result are valid even when an error is returned: they cover the batches
// that committed.
func (c *Client) PruneExpired(ctx context.Context, p PruneParams) (res PruneResult, err error) {
	if p.BatchSize == 0 {
		p.BatchSize = DefaultPruneBatch
	}
	if p.BatchSize < 1 || p.BatchSize > maxPruneBatch {
		return res, &OptionError{Field: "BatchSize", Msg: fmt.Sprintf("%d is outside 1..%d", p.BatchSize, maxPruneBatch)}
	}
	if p.Budget < 0 {
		return res, &OptionError{Field: "Budget", Msg: "must be >= 0"}
	}
	if p.Budget == 0 {
		p.Budget = DefaultPruneBudget
	}
	type class struct {
		state  generics.JobState
		before time.Time
		after  time.Time
		count  *int64
	}
	var active []*class
	if !p.FinishedBefore.IsZero() {
		active = append(active, &class{generics.JobStateSucceeded, p.FinishedBefore, pruneFloor, &res.Finished})
	}
	if !p.DeadBefore.IsZero() {
		active = append(active, &class{generics.JobStateDead, p.DeadBefore, pruneFloor, &res.Dead})
	}
	if len(active) == 0 {
		res.Drained = true
		return res, nil
	}
	start := time.Now()

	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("tenure: prune: %w", err)
	}
	defer conn.Release() // a closed connection (failed unlock) is destroyed, not pooled
	q := c.qtx(conn)
	got, err := q.TryLockSession(ctx, c.sch.Key(locks.Prune))
	if err != nil {
		return res, fmt.Errorf("tenure: prune: taking the prune lock: %w", err)
	}
	if !got {
		res.Skipped = true
		return res, nil
	}
	defer func() {
		if uerr := unlockSession(ctx, conn, q, c.sch.Key(locks.Prune)); uerr != nil && err == nil {
			err = uerr
		}
	}()

	for len(active) > 0 {
		next := active[:0]
		for _, cl := range active {
			b, berr := pruneBatch(ctx, q, cl.state, cl.before, cl.after, p.BatchSize)
			if berr != nil {
				return res, fmt.Errorf("tenure: prune %s jobs: %w", cl.state, berr)
			}
			res.Batches++
			*cl.count += b.Jobs
			res.Effects += b.Effects
			cl.after = b.LastFinishedAt
			if b.Jobs == int64(p.BatchSize) {
				next = append(next, cl)
			}
		}
		active = next
		if len(active) > 0 && (time.Since(start) >= p.Budget || ctx.Err() != nil) {
			return res, nil
		}
	}
	// A sequence's row is written when a job is inserted into it, so the row of a key whose
	// last job was pruned here was written before that job's class cutoff: the latest cutoff
	// bounds the rows worth reading.
	before := p.FinishedBefore
	if p.DeadBefore.After(before) {
		before = p.DeadBefore
	}
	// A workflow's row is written with its tasks, so the row of a workflow whose last task
	// was pruned here was created before that task's class cutoff: the same bound.
	over := func() bool { return time.Since(start) >= p.Budget || ctx.Err() != nil }
	after := ""
	done, err := drainSide(p.BatchSize, over, "sequences", func() (int64, error) {
		b, err := q.PruneSequencesBatch(ctx, gen.PruneSequencesBatchParams{After: after, Before: before, MaxKeys: int32(p.BatchSize)})
		after = b.LastKey
		res.Sequences += b.Deleted
		return b.Keys, err
	})
	if !done || err != nil {
		return res, err
	}
	var afterID uuid.UUID
	done, err = drainSide(p.BatchSize, over, "workflows", func() (int64, error) {
		b, err := q.PruneWorkflowsBatch(ctx, gen.PruneWorkflowsBatchParams{After: afterID, Before: before, MaxRows: int32(p.BatchSize)})
		afterID = b.LastID
		res.Workflows += b.Deleted
		return b.RowsRead, err
	})
	if !done || err != nil {
		return res, err
	}
	res.Drained = true
	return res, nil
}

// drainSide runs the batches of one side table's pruning (each batch reads at most size rows,
// deletes those whose jobs are gone and returns how many it read) until a batch reads fewer
// than size rows (done), over reports the budget spent (not done), or a batch fails.
func drainSide(size int, over func() bool, what string, batch func() (int64, error)) (done bool, err error) {
	for {
		read, err := batch()
		if err != nil {
			return false, fmt.Errorf("tenure: prune %s: %w", what, err)
		}
		if read < int64(size) {
			return true, nil
		}
		if over() {
			return false, nil
		}
	}
}

// unlockSession releases the schema's locks.Prune key on conn, or closes conn when it cannot: closing the
// session is the only sure way to drop a session-level lock.
func unlockSession(ctx context.Context, conn *pgxpool.Conn, q *gen.Queries, key int64) error {
	if conn.Conn().IsClosed() {
		return nil // the session ended, and the lock with it
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	released, err := q.UnlockSession(uctx, key)
	if err == nil && !released {
		err = errors.New("lock was not held")
	}
	if err != nil {
		_ = conn.Conn().Close(uctx)
		return fmt.Errorf("tenure: prune: releasing the prune lock: %w", err)
	}
	return nil
}

// pruneBatch runs one batch statement of the class of state.
func pruneBatch(ctx context.Context, q *gen.Queries, state generics.JobState, before, after time.Time, limit int) (gen.PruneFinishedBatchRow, error) {
	switch state {
	case generics.JobStateSucceeded, generics.JobStateCancelled:
		r, err := q.PruneFinishedBatch(ctx, gen.PruneFinishedBatchParams{Before: before, After: after, MaxJobs: int32(limit)})
		return *r, err
	case generics.JobStateDead:
		r, err := q.PruneDeadBatch(ctx, gen.PruneDeadBatchParams{Before: before, After: after, MaxJobs: int32(limit)})
		return gen.PruneFinishedBatchRow(*r), err
	default:
		return gen.PruneFinishedBatchRow{}, &OptionError{Field: "State", Msg: fmt.Sprintf("cannot purge %q jobs", state)}
	}
}
