package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/logkey"
)

// Action identifies who performs an operator action and why; both go to the audit table.
type Action struct {
	Actor  string
	Reason string
}

func (a Action) check() error {
	// The audit table's own rules (generics/limits.go): characters, valid UTF-8, no NUL.
	for _, f := range []struct {
		v   string
		max int
	}{{a.Actor, generics.MaxNameChars}, {a.Reason, generics.MaxReasonChars}} {
		if f.v == "" || utf8.RuneCountInString(f.v) > f.max || !utf8.ValidString(f.v) || strings.IndexByte(f.v, 0) >= 0 {
			return ErrMissingActor
		}
	}
	return nil
}

// CancelOutcome says what Cancel did.
type CancelOutcome string

const (
	// Cancelled: the job was ready and is now cancelled; no worker will run it.
	Cancelled CancelOutcome = "cancelled"
	// CancelRequested: the job is running; its worker cancels the handler's context (at once
	// through NOTIFY, at the latest on its next heartbeat) and ends the job cancelled.
	CancelRequested CancelOutcome = "cancel_requested"
)

// Cancel cancels a job. A ready job (or one waiting for its dependencies) is cancelled at
// once, and the jobs waiting for it are settled in the same transaction (cancelled, run, or
// left blocked, by their policy); a running one gets a cancel request.
// A job in a final state returns a *StateError wrapping ErrAlreadyFinal; a missing one
// ErrNotFound. The action is audited.
func (c *Client) Cancel(ctx context.Context, id int64, act Action) (CancelOutcome, error) {
	if err := act.check(); err != nil {
		return "", err
	}
	var out CancelOutcome
	var j gen.TenureJob
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.qtx(tx)
		var err error
		j, err = lockJob(ctx, q, id)
		if err != nil {
			return err
		}
		switch generics.JobState(j.State) {
		case generics.JobStateReady, generics.JobStateWaiting:
			if _, err := q.CancelReady(ctx, id); err != nil {
				return err
			}
			if err := q.NotifyDone(ctx, strconv.FormatInt(id, 10)); err != nil { // Wait
				return err
			}
			out = Cancelled
		case generics.JobStateRunning:
			if _, err := q.RequestCancel(ctx, id); err != nil {
				return err
			}
			if err := q.NotifyCancel(ctx, id); err != nil {
				return err
			}
			out = CancelRequested
		default:
			return &StateError{ID: id, State: generics.JobState(j.State), Err: ErrAlreadyFinal}
		}
		return audit(ctx, q, act, "cancel", &id, map[string]any{"from_state": j.State, "outcome": out})
	})
	if err != nil {
		return "", err
	}
	c.log.InfoContext(ctx, "tenure: job cancel", jobAttrs(j, act, "outcome", out)...)
	return out, nil
}

// ReinjectOpts adjusts a re-injected job.
type ReinjectOpts struct {
	// MaxAttempts, when > 0, replaces the job's attempt budget.
	MaxAttempts int
}

// Reinject moves a dead job back to ready with a fresh attempt budget (attempts reset to 0;
// the generation keeps growing, so workers of its earlier life stay fenced out). A job that is
// not dead returns a *StateError wrapping ErrNotDead. The action is audited with the job's
// last error code and attempts.
func (c *Client) Reinject(ctx context.Context, id int64, act Action, opts *ReinjectOpts) (*generics.JobRow, error) {
	if err := act.check(); err != nil {
		return nil, err
	}
	var maxAttempts *int32
	if opts != nil && opts.MaxAttempts != 0 {
		if opts.MaxAttempts < 1 || opts.MaxAttempts > 1000 {
			return nil, &OptionError{Field: "MaxAttempts", Msg: "must be within 1..1000"}
		}
		m := int32(opts.MaxAttempts)
		maxAttempts = &m
	}
	var row *generics.JobRow
	var j gen.TenureJob
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.qtx(tx)
		var err error
		j, err = lockJob(ctx, q, id)
		if err != nil {
			return err
		}
		if generics.JobState(j.State) != generics.JobStateDead {
			return &StateError{ID: id, State: generics.JobState(j.State), Err: ErrNotDead}
		}
		if err := checkUniqueHolder(ctx, q, j); err != nil {
			return err
		}
		nj, err := q.Reinject(ctx, gen.ReinjectParams{ID: id, MaxAttempts: maxAttempts})
		if err != nil {
			return uniqueViolation(id, err)
		}
		if err := q.NotifyQueue(ctx, gen.NotifyQueueParams{Queue: nj.Queue, Priority: nj.Priority, RunAt: nj.RunAt}); err != nil {
			return err
		}
		if row, err = rowFromGen(*nj); err != nil {
			return err
		}
		return audit(ctx, q, act, "reinject", &id, map[string]any{
			"attempts": j.Attempts, "last_error_code": j.LastErrorCode, "generation": j.Generation,
			"max_attempts": nj.MaxAttempts,
		})
	})
	if err != nil {
		return nil, err
	}
	c.log.InfoContext(ctx, "tenure: job reinjected", jobAttrs(j, act)...)
	return row, nil
}

// Retry makes a job run again now, audited (action "retry"): a ready job (scheduled, or
// waiting out a retry backoff) becomes due at once, keeping its attempts; a dead or cancelled
// job goes back to ready with a fresh attempt budget, like Reinject. A running job returns a
// *StateError wrapping ErrJobRunning, a succeeded one ErrAlreadyFinal, a missing one
// ErrNotFound. It returns the job as it is now.
func (c *Client) Retry(ctx context.Context, id int64, act Action) (*generics.JobRow, error) {
	if err := act.check(); err != nil {
		return nil, err
	}
	var row *generics.JobRow
	var j gen.TenureJob
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.qtx(tx)
		var err error
		j, err = lockJob(ctx, q, id)
		if err != nil {
			return err
		}
		var nj *gen.TenureJob
		switch generics.JobState(j.State) {
		case generics.JobStateReady:
			nj, err = q.RunNow(ctx, id)
		case generics.JobStateDead, generics.JobStateCancelled:
			if err := checkUniqueHolder(ctx, q, j); err != nil {
				return err
			}
			nj, err = q.Reinject(ctx, gen.ReinjectParams{ID: id})
			err = uniqueViolation(id, err)
		case generics.JobStateRunning:
			return &StateError{ID: id, State: generics.JobState(j.State), Err: ErrJobRunning}
		case generics.JobStateWaiting:
			return &StateError{ID: id, State: generics.JobState(j.State), Err: ErrJobWaiting}
		default:
			return &StateError{ID: id, State: generics.JobState(j.State), Err: ErrAlreadyFinal}
		}
		if err != nil {
			return err
		}
		if err := q.NotifyQueue(ctx, gen.NotifyQueueParams{Queue: nj.Queue, Priority: nj.Priority, RunAt: nj.RunAt}); err != nil {
			return err
		}
		if row, err = rowFromGen(*nj); err != nil {
			return err
		}
		return audit(ctx, q, act, "retry", &id, map[string]any{
			"from_state": j.State, "attempts": j.Attempts, "last_error_code": j.LastErrorCode,
			"run_at_was": j.RunAt, "generation": j.Generation,
		})
	})
	if err != nil {
		return nil, err
	}
	c.log.InfoContext(ctx, "tenure: job retried", jobAttrs(j, act)...)
	return row, nil
}

// Delete deletes one job that is not running, with its effect-ledger rows, audited (action
// "delete", with the job's queue, kind, state, attempts and payload in the detail). A running
// job returns a *StateError wrapping ErrJobRunning (cancel it first), an unfinished job that
// other jobs wait for ErrHasDependents (cancel it first); a missing one ErrNotFound.
func (c *Client) Delete(ctx context.Context, id int64, act Action) error {
	if err := act.check(); err != nil {
		return err
	}
	var j gen.TenureJob
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.qtx(tx)
		var err error
		j, err = lockJob(ctx, q, id)
		if err != nil {
			return err
		}
		if generics.JobState(j.State) == generics.JobStateRunning {
			return &StateError{ID: id, State: generics.JobState(j.State), Err: ErrJobRunning}
		}
		if j.HasDependents.Valid && j.HasDependents.Bool && !generics.JobState(j.State).Final() {
			// Its dependents would wait for ever: cancel it first (which settles them).
			return &StateError{ID: id, State: generics.JobState(j.State), Err: ErrHasDependents}
		}
		n, err := q.DeleteJob(ctx, id)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("tenure: delete job %d: %d rows deleted", id, n)
		}
		if err := q.NotifyDone(ctx, strconv.FormatInt(id, 10)); err != nil { // Wait: ErrNotFound
			return err
		}
		return audit(ctx, q, act, "delete", &id, map[string]any{
			"queue": j.Queue, "kind": j.Kind, "state": j.State, "attempts": j.Attempts,
			"last_error_code": j.LastErrorCode, "payload": json.RawMessage(j.Payload),
		})
	})
	if err != nil {
		return err
	}
	c.log.InfoContext(ctx, "tenure: job deleted", jobAttrs(j, act)...)
	return nil
}

// PurgeParams selects final jobs to delete.
type PurgeParams struct {
	// State is generics.JobStateSucceeded, generics.JobStateCancelled (both purged together) or generics.JobStateDead.
	State generics.JobState
	// Before: only jobs finished before this time.
	Before time.Time
	// Limit bounds the rows deleted in this call (1..100000; default 10000).
	Limit int
}

// Purge deletes final jobs (and their effect-ledger rows) finished before p.Before, audited.
// It returns the number of jobs deleted.
func (c *Client) Purge(ctx context.Context, act Action, p PurgeParams) (int64, error) {
	if err := act.check(); err != nil {
		return 0, err
	}
	if p.Limit == 0 {
		p.Limit = 10000
	}
	if p.Limit < 1 || p.Limit > 100000 {
		return 0, &OptionError{Field: "Limit", Msg: "must be within 1..100000"}
	}
	if p.Before.IsZero() {
		return 0, &OptionError{Field: "Before", Msg: "must be set"}
	}
	var n int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.qtx(tx)
		var err error
		n, err = prune(ctx, q, p.State, p.Before, p.Limit)
		if err != nil {
			return err
		}
		return audit(ctx, q, act, "purge", nil, map[string]any{"state": p.State, "before": p.Before, "deleted": n})
	})
	if err != nil {
		return n, err
	}
	c.log.InfoContext(ctx, "tenure: jobs purged", logkey.Jobs, n, "state", string(p.State), "actor", act.Actor, "reason", act.Reason)
	return n, nil
}

func prune(ctx context.Context, q *gen.Queries, state generics.JobState, before time.Time, limit int) (int64, error) {
	b, err := pruneBatch(ctx, q, state, before, pruneFloor, limit)
	return b.Jobs, err
}

// AuditEntry is one audited operator action.
type AuditEntry struct {
	ID     int64
	At     time.Time
	Actor  string
	Action string
	Reason string
	JobID  *int64
	Detail json.RawMessage
}

// Audit lists audit entries (of one job when jobID > 0) after afterID, oldest first.
func (c *Client) Audit(ctx context.Context, jobID int64, afterID int64, limit int) ([]AuditEntry, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	arg := gen.ListAuditParams{AfterID: afterID, MaxRows: int32(limit)}
	if jobID > 0 {
		arg.JobID = &jobID
	}
	rows, err := c.q.ListAudit(ctx, arg)
	if err != nil {
		return nil, err
	}
	out := make([]AuditEntry, len(rows))
	for i, r := range rows {
		out[i] = AuditEntry{ID: r.ID, At: r.At, Actor: r.Actor, Action: r.Action, Reason: r.Reason, JobID: r.JobID, Detail: r.Detail}
	}
	return out, nil
}

// jobAttrs are the attributes of an operator action's log record about job j (as it was
// when the action locked it: its attempts and generation before the action), followed by
// the actor, the reason and more (docs/operations.md, "Logs").
func jobAttrs(j gen.TenureJob, act Action, more ...any) []any {
	return append([]any{logkey.JobID, j.ID, logkey.Kind, j.Kind, logkey.Queue, j.Queue,
		logkey.Attempt, int(j.Attempts), logkey.Generation, j.Generation, "actor", act.Actor, "reason", act.Reason}, more...)
}

func lockJob(ctx context.Context, q *gen.Queries, id int64) (gen.TenureJob, error) {
	j, err := q.LockJob(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return *j, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return *j, err
}

func audit(ctx context.Context, q *gen.Queries, act Action, action string, jobID *int64, detail map[string]any) error {
	raw, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	_, err = q.InsertAudit(ctx, gen.InsertAuditParams{Actor: act.Actor, Action: action, Reason: act.Reason, JobID: jobID, Detail: raw})
	return err
}

// checkUniqueHolder refuses to bring unique job j back to ready while another job holds its
// key (ErrUniqueConflict, naming the holder).
func checkUniqueHolder(ctx context.Context, q *gen.Queries, j gen.TenureJob) error {
	if j.UniqueKey == nil {
		return nil
	}
	holder, err := q.UniqueHolder(ctx, gen.UniqueHolderParams{Key: j.UniqueKey, ID: j.ID})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return &UniqueConflictError{ID: j.ID, HolderID: holder}
}

// uniqueViolation turns the unique index's refusal (a holder inserted after
// checkUniqueHolder looked) into ErrUniqueConflict.
func uniqueViolation(id int64, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "jobs_unique_idx" {
		return &UniqueConflictError{ID: id}
	}
	return err
}
