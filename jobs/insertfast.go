package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
)

// InsertManyFast inserts the jobs with PostgreSQL's COPY protocol in one transaction and
// returns how many it inserted; it does not return their ids. It validates, encodes and signals
// like InsertMany (the same options, hooks and defaults, the new-job NOTIFY per queue and
// priority band with due jobs) and stores the same rows; it is for bulk loads that do not need
// the ids: COPY spares the server InsertMany's per-row parameter arrays
// (BenchmarkBulkEnqueueVsCeiling; docs/guide.md §21, "Bulk enqueue").
//
// Unique jobs (InsertOpts.Unique) cannot be copied (COPY has no ON CONFLICT): a call with one
// returns an *OptionError (Field "Unique") and inserts nothing; use InsertMany for them. A job
// without RunAt or Delay is due at the transaction's start on the database clock, as with
// InsertMany; one with Delay is due Delay after it.
func (c *Client) InsertManyFast(ctx context.Context, params []InsertManyParams) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		n, err = c.InsertManyFastTx(ctx, tx, params)
		return err
	})
	return n, err
}

// InsertManyFastTx is InsertManyFast inside the caller's transaction (the jobs commit with it).
func (c *Client) InsertManyFastTx(ctx context.Context, tx pgx.Tx, params []InsertManyParams) (int64, error) {
	if tx == nil {
		return 0, &OptionError{Field: "tx", Msg: "must not be nil"}
	}
	all, err := c.prepareMany(ctx, params)
	if err != nil || len(all) == 0 {
		return 0, err
	}
	var delayed, scheduled, immediate, extras bool
	for i := range all {
		p := &all[i]
		if p.unique != nil {
			return 0, &OptionError{Field: "Unique", Msg: "InsertManyFast cannot insert unique jobs (COPY has no ON CONFLICT): use InsertMany"}
		}
		switch {
		case p.delayUs != 0:
			delayed = true
		case p.runAt != nil:
			scheduled = true
		default:
			immediate = true
		}
		extras = extras || len(p.tags) > 0 || (len(p.metadata) > 0 && string(p.metadata) != "{}")
	}
	q := c.q.WithTx(tx)
	// run_at: left to its default (now(), the transaction's start) when every job is due
	// immediately; otherwise every row carries it, computed from the transaction's start.
	explicit := delayed || scheduled
	var now time.Time
	if delayed || (scheduled && immediate) {
		if now, err = q.DatabaseNow(ctx); err != nil {
			return 0, err
		}
	}
	type band struct {
		queue    string
		priority int16
	}
	// Every band with due jobs gets a signal carrying its oldest due time (0: now()).
	due := map[band]int64{}
	cols := []string{"queue", "kind", "payload", "payload_version", "priority", "max_attempts", "lease_ms"}
	if explicit {
		cols = append(cols, "run_at")
	}
	if extras {
		// Otherwise both are left to their defaults ('{}'), sparing the server a jsonb and an
		// array input per row.
		cols = append(cols, "metadata", "tags")
	}
	rows := make([][]any, len(all))
	clientNow := time.Now()
	for i := range all {
		p := &all[i]
		row := make([]any, 0, len(cols))
		row = append(row, p.queue, p.kind, p.payload, p.version, p.priority, p.maxAttempts, p.leaseMs)
		var dueUs int64 = -1 // -1: not due yet
		switch {
		case p.delayUs != 0:
			runAt := now.Add(time.Duration(p.delayUs) * time.Microsecond)
			row = append(row, runAt)
		case p.runAt != nil:
			row = append(row, *p.runAt)
			if !p.runAt.After(clientNow) {
				dueUs = max(p.runAt.UnixMicro(), 1)
			}
		default:
			if explicit {
				row = append(row, now)
				dueUs = max(now.UnixMicro(), 1)
			} else {
				dueUs = 0 // now(), in the signal's statement
			}
		}
		if dueUs >= 0 {
			b := band{p.queue, p.priority}
			if cur, ok := due[b]; !ok || dueUs < cur {
				due[b] = dueUs
			}
		}
		if extras {
			row = append(row, p.metadata, p.tags)
		}
		rows[i] = row
	}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"tenure", "jobs"}, cols, pgx.CopyFromRows(rows))
	if err != nil {
		return 0, err
	}
	if len(due) > 0 {
		var arg gen.NotifyBandsParams
		for b, us := range due {
			arg.Queues = append(arg.Queues, b.queue)
			arg.Priorities = append(arg.Priorities, b.priority)
			arg.RunAtUs = append(arg.RunAtUs, us)
		}
		if err := q.NotifyBands(ctx, arg); err != nil {
			return 0, err
		}
	}
	return n, nil
}
