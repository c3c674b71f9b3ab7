package jobs

import (
	"context"
	"fmt"
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
//
// Every job's options are checked before anything is sent; its args are encoded while the rows
// before it are on their way to the server, so a job whose args do not encode (a
// generics.PayloadError) ends the COPY part-way and the transaction rolls back: the call still
// inserts nothing and returns that error.
func (c *Client) InsertManyFast(ctx context.Context, params []InsertManyParams) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		n, err = c.insertManyFast(ctx, tx, params, true)
		return err
	})
	return n, err
}

// InsertManyFastTx is InsertManyFast inside the caller's transaction (the jobs commit with it).
// Unlike InsertManyFast it encodes every job's args before sending anything, so an invalid job
// returns its error with the caller's transaction still usable.
func (c *Client) InsertManyFastTx(ctx context.Context, tx pgx.Tx, params []InsertManyParams) (int64, error) {
	if tx == nil {
		return 0, &OptionError{Field: "tx", Msg: "must not be nil"}
	}
	return c.insertManyFast(ctx, tx, params, false)
}

// insertManyFast copies params' jobs in tx. With streamArgs each job's args are encoded as the
// COPY reads its row (csvRows.encode), after every job's options were checked; otherwise
// all are encoded first.
func (c *Client) insertManyFast(ctx context.Context, tx pgx.Tx, params []InsertManyParams, streamArgs bool) (int64, error) {
	var all []prepared
	var err error
	if streamArgs {
		all = make([]prepared, len(params))
		for i, p := range params {
			if all[i], err = c.prepareOpts(ctx, p.Args, p.Opts); err != nil {
				return 0, fmt.Errorf("job %d of %d: %w", i, len(params), err)
			}
		}
	} else if all, err = c.prepareMany(ctx, params); err != nil {
		return 0, err
	}
	if len(all) == 0 {
		return 0, nil
	}
	var delayed, scheduled, immediate, extras bool
	for i := range all {
		p := &all[i]
		if p.unique != nil || p.uniqueOpts != nil {
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
	cols := "queue, kind, payload, payload_version, priority, max_attempts, lease_ms"
	if explicit {
		cols += ", run_at"
	}
	if extras {
		// Otherwise both are left to their defaults ('{}'), sparing the server a jsonb and an
		// array input per row.
		cols += ", metadata, tags"
	}
	// Each row's run_at (explicit only) and the due bands, before the rows are sent.
	var runAts []time.Time
	if explicit {
		runAts = make([]time.Time, len(all))
	}
	clientNow := time.Now()
	for i := range all {
		p := &all[i]
		var dueUs int64 = -1 // -1: not due yet
		switch {
		case p.delayUs != 0:
			runAts[i] = now.Add(time.Duration(p.delayUs) * time.Microsecond)
		case p.runAt != nil:
			runAts[i] = *p.runAt
			if !p.runAt.After(clientNow) {
				dueUs = max(p.runAt.UnixMicro(), 1)
			}
		case explicit:
			runAts[i] = now
			dueUs = max(now.UnixMicro(), 1)
		default:
			dueUs = 0 // now(), in the signal's statement
		}
		if dueUs >= 0 {
			b := band{p.queue, p.priority}
			if cur, ok := due[b]; !ok || dueUs < cur {
				due[b] = dueUs
			}
		}
	}
	// The rows go as COPY CSV (copycsv.go says why not binary), encoded as pgconn reads them,
	// so the server parses the first rows while the rest are encoded.
	rows := &csvRows{all: all, runAts: runAts, extras: extras}
	if streamArgs {
		rows.encode = c.encodePayload
	}
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, rows, "COPY tenure.jobs ("+cols+") FROM STDIN (FORMAT csv)")
	if rows.panicked != nil {
		panic(rows.panicked) // a job's args panicked while encoding: on the caller's goroutine, as InsertMany would
	}
	if rows.err != nil {
		return 0, rows.err // the COPY was abandoned for it (the server's error only says so)
	}
	if err != nil {
		return 0, err
	}
	n := tag.RowsAffected()
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
