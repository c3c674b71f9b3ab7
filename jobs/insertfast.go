package jobs

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/db/migrations"
)

// InsertManyFast is the fast path for bulk loads that need neither the stored rows nor
// uniqueness: it inserts the jobs with PostgreSQL's COPY protocol in one transaction and
// returns how many it inserted (all of them, or none with an error), not their rows or ids
// (InsertMany returns those). It validates, encodes and signals like InsertMany (the same
// options, hooks and defaults, the new-job NOTIFY per queue and priority band with due jobs)
// and stores the same rows: COPY spares the server InsertMany's per-row parameter arrays and
// returned rows (BenchmarkBulkEnqueueVsCeiling; docs/guide.md §21, "Bulk enqueue").
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
	return c.insertManyFast(ctx, nil, params, true)
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

// insertManyFast copies params' jobs in tx, or (tx nil) in a transaction of its own. With
// streamArgs each job's args are encoded as the COPY reads its row (csvRows.encode), after every
// job's options were checked; otherwise all are encoded first.
//
// The COPY and the new-job signal go to the server as one simple-protocol query ("COPY ... FROM
// STDIN; SELECT pg_notify(...)", fastSignalSQL), so the signal costs no round trip of its own.
// Without tx that query is the whole transaction (a multi-statement query runs as one implicit
// transaction: the rows and the signal commit together, or neither does), which spares BEGIN and
// COMMIT their round trips too; only a call whose rows need the database's clock (a Delay, or
// due-now jobs mixed with scheduled ones) opens an explicit transaction, so its run_at values
// are computed from the same transaction start as the rows left to run_at's default.
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
		if p.sequence != "" {
			// COPY writes rows only: it cannot take a sequence's key, wait for its previous
			// job or record the new one. Refused rather than inserted outside the sequence.
			return 0, fmt.Errorf("job %d of %d: %w", i, len(all), &OptionError{Field: "Sequence",
				Msg: "InsertManyFast cannot insert jobs of a sequence (COPY cannot take the sequence's key): use InsertMany, Insert or InsertTx"})
		}
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
	// run_at: left to its default (now(), the transaction's start) when every job is due
	// immediately; otherwise every row carries it, computed from the transaction's start.
	explicit := delayed || scheduled
	needNow := delayed || (scheduled && immediate)
	if tx == nil && needNow {
		var n int64
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			var err error
			n, err = c.copyJobs(ctx, tx.Conn().PgConn(), tx, all, explicit, needNow, extras, streamArgs)
			return err
		})
		return n, err
	}
	if tx != nil {
		return c.copyJobs(ctx, tx.Conn().PgConn(), tx, all, explicit, needNow, extras, streamArgs)
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	return c.copyJobs(ctx, conn.Conn().PgConn(), nil, all, explicit, needNow, extras, streamArgs)
}

// copyJobs sends all's rows and their new-job signal as one query on pg (in tx when it is not
// nil; tx is needed, and is not nil, when needNow: the rows' run_at values are computed from
// its start).
func (c *Client) copyJobs(ctx context.Context, pg *pgconn.PgConn, tx pgx.Tx, all []prepared, explicit, needNow, extras, streamArgs bool) (int64, error) {
	var now time.Time
	if needNow {
		var err error
		if now, err = c.qtx(tx).DatabaseNow(ctx); err != nil {
			return 0, err
		}
	}
	// Every band with due jobs gets a signal carrying its oldest due time (0: now()).
	due := map[signalBand]int64{}
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
			b := signalBand{p.queue, p.priority}
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
	sql := "COPY " + c.sch.Qualify("jobs") + " (" + cols + ") FROM STDIN (FORMAT csv)"
	if len(due) > 0 {
		sql += "; " + fastSignalSQL(c.sch.JobsChannel(), due)
	}
	_, err := pg.CopyFrom(ctx, rows, sql)
	if rows.panicked != nil {
		panic(rows.panicked) // a job's args panicked while encoding: on the caller's goroutine, as InsertMany would
	}
	if rows.err != nil {
		return 0, rows.err // the COPY was abandoned for it (the server's error only says so)
	}
	if err != nil {
		return 0, migrations.WrapNotMigrated(err)
	}
	// COPY inserts every row or fails; the command tag pgconn returns is the signal's.
	return int64(len(all)), nil
}

// signalBand is a queue and priority band InsertManyFast gave due jobs.
type signalBand struct {
	queue    string
	priority int16
}

// fastSignalSQL is the new-job signal InsertJob and InsertJobs send on channel (the schema's
// jobs channel; db/queries.sql: queue,
// priority and the band's oldest due time in microseconds since the epoch, separated by chr(31)),
// for the bands in due (due time 0: now(), the transaction's start, the due time of rows COPY
// left to run_at's default), as a statement without parameters: it travels in the COPY's own
// simple-protocol query. Queue names go as hex (decode), so no quoting rule or server setting
// (standard_conforming_strings) can change what the statement says.
func fastSignalSQL(channel string, due map[signalBand]int64) string {
	bands := make([]signalBand, 0, len(due))
	for b := range due {
		bands = append(bands, b)
	}
	slices.SortFunc(bands, func(a, b signalBand) int { // a stable statement text for one set of bands
		if c := strings.Compare(a.queue, b.queue); c != 0 {
			return c
		}
		return int(a.priority) - int(b.priority)
	})
	var sb strings.Builder
	sb.WriteString("SELECT pg_notify('" + channel + "', convert_from(decode(b.q, 'hex'), 'UTF8') || chr(31) || b.p || chr(31) || " +
		"CASE WHEN b.us = 0 THEN (extract(epoch FROM now()) * 1000000)::bigint ELSE b.us END) FROM (VALUES ")
	for i, b := range bands {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("('")
		sb.WriteString(hex.EncodeToString([]byte(b.queue)))
		sb.WriteString("', ")
		sb.WriteString(strconv.Itoa(int(b.priority)))
		sb.WriteString(", ")
		sb.WriteString(strconv.FormatInt(due[b], 10))
		sb.WriteString("::bigint)")
	}
	sb.WriteString(") AS b(q, p, us)")
	return sb.String()
}
