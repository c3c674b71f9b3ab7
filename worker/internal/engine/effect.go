package engine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
)

// LedgerRecord is one effect's row in the effect ledger (worker.Effect reads and records it
// through the attempt's Execution).
type LedgerRecord struct {
	Result     []byte
	Generation int64
	Refused    string // non-empty: the effect ran, its result was not kept
}

// GetEffect reads the ledger's record of key (ok false: none), on the application's pool.
// A read that failed because the attempt lost its lease returns the stale-write error of the
// effect name.
func (e *Execution) GetEffect(ctx context.Context, key, name string, meta *generics.JobRow) (LedgerRecord, bool, error) {
	rec, err := e.q.w.qon(e.q.w.pool).GetEffect(ctx, key)
	switch {
	case leaseLostErr(e.ctx, err):
		return LedgerRecord{}, false, NewStaleWriteError(meta.ID, meta.Generation, "effect "+name)
	case errors.Is(err, pgx.ErrNoRows):
		return LedgerRecord{}, false, nil
	case err != nil:
		return LedgerRecord{}, false, err
	}
	return LedgerRecord{Result: rec.Result, Generation: rec.Generation, Refused: optString(rec.Refused)}, true, nil
}

// RecordEffect writes rec as key's record, fenced by the attempt's claim token, and returns
// the record the ledger holds (another generation's, when one was there first). A write the
// fence refused is counted stale and returns the stale-write error of the effect name.
func (e *Execution) RecordEffect(ctx context.Context, key, name string, meta *generics.JobRow, rec LedgerRecord) (LedgerRecord, error) {
	row, err := e.q.w.qon(e.q.w.pool).RecordEffect(ctx, gen.RecordEffectParams{Key: key, JobID: meta.ID, Name: name,
		Generation: meta.Generation, Result: rec.Result, ClaimToken: e.c.token, Refused: rec.Refused})
	if errors.Is(err, pgx.ErrNoRows) {
		e.q.w.m.StaleRejected.Add(1)
		return LedgerRecord{}, NewStaleWriteError(meta.ID, meta.Generation, "effect "+name)
	}
	if err != nil {
		return LedgerRecord{}, err
	}
	return LedgerRecord{Result: row.Result, Generation: row.Generation, Refused: optString(row.Refused)}, nil
}

func optString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
