package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/tenureq/tenure/generics"
)

// This file lets another engine run the handlers this package runs, Effect included: package
// tenurenats consumes jobs from NATS JetStream and hands them to the same
// func(ctx, *generics.Job[A]) error handlers. There is no job row to fence on there, so the
// engine brings its own ledger and states the attempt's identity in the handler's context.

// EffectRecord is one effect's record in an ExternalLedger.
type EffectRecord struct {
	Key        string // the effect's full key (prefix included), as EffectCall.Key
	JobID      int64
	Name       string
	Generation int64
	Result     json.RawMessage // JSON null when Refused is set
	// Refused, when not empty, says why the effect's result could not be kept: the effect ran
	// and must not run again (ErrEffectResultRefused).
	Refused string
}

// ExternalLedger is the effect ledger of an engine other than this package's (see
// WithExternalAttempt).
type ExternalLedger interface {
	// GetEffect returns the record of key (Generation, Result, Refused at least); ok is false
	// when nothing is recorded.
	GetEffect(ctx context.Context, key string) (rec EffectRecord, ok bool, err error)
	// RecordEffect records rec unless key already has a record; it returns the record that
	// holds (rec, or the one an earlier attempt wrote first).
	RecordEffect(ctx context.Context, rec EffectRecord) (EffectRecord, error)
}

// ExternalAttempt identifies a handler attempt run by another engine, for Effect.
type ExternalAttempt struct {
	Job *generics.JobRow // the attempt; the handler passes a row with its ID and ClaimToken to Effect
	// KeyPrefix is put in front of generics.EffectKey(Job.ID, name); it must keep the keys
	// apart from this package's (whose ids are tenure.jobs ids).
	KeyPrefix string
	Ledger    ExternalLedger
}

type externalKey struct{}

// WithExternalAttempt returns ctx under which Effect, called with a job row that has a.Job's
// ID and ClaimToken, records and replays through a.Ledger instead of tenure.effects. Engines
// call it before they run a handler; handlers need not know which engine runs them.
// CompleteTx still returns ErrNotInHandler under such a context: there is no job row to
// complete in the caller's transaction.
func WithExternalAttempt(ctx context.Context, a ExternalAttempt) context.Context {
	return context.WithValue(ctx, externalKey{}, &a)
}

func externalAttempt(ctx context.Context, meta *generics.JobRow) *ExternalAttempt {
	a, _ := ctx.Value(externalKey{}).(*ExternalAttempt)
	if a == nil || a.Ledger == nil || a.Job == nil || meta == nil || a.Job.ID != meta.ID ||
		derefUUID(meta.ClaimToken) == uuid.Nil || derefUUID(a.Job.ClaimToken) != derefUUID(meta.ClaimToken) {
		return nil
	}
	return a
}

// externalLedger is Effect's ledger for an attempt another engine runs: the engine's own
// ExternalLedger, where the first record wins.
type externalLedger struct {
	a    *ExternalAttempt
	name string
}

func (l externalLedger) get(ctx context.Context, key string, _ *generics.JobRow) (ledgerRecord, bool, error) {
	rec, ok, err := l.a.Ledger.GetEffect(ctx, key)
	if err != nil || !ok {
		return ledgerRecord{}, false, err
	}
	return ledgerRecord{result: rec.Result, generation: rec.Generation, refused: rec.Refused}, true, nil
}

func (l externalLedger) record(ctx context.Context, key string, meta *generics.JobRow, rec ledgerRecord) (ledgerRecord, error) {
	held, err := l.a.Ledger.RecordEffect(ctx, EffectRecord{Key: key, JobID: meta.ID, Name: l.name,
		Generation: rec.generation, Result: rec.result, Refused: rec.refused})
	if err != nil {
		return ledgerRecord{}, err
	}
	return ledgerRecord{result: held.Result, generation: held.Generation, refused: held.Refused}, nil
}

// Classify maps a handler's result and its context to the error code and the explicit retry
// delay (0: use the retry policy) exactly as this engine does: a *JobError's code (Permanent,
// RetryAfter, WithCode), TIMEOUT when the context ended with ErrHandlerTimeout, LEASE_EXPIRED
// with ErrLeaseLost, else HANDLER_ERROR. For other engines running the same handlers.
func Classify(ctx context.Context, err error) (ErrorCode, time.Duration) { return classify(ctx, err) }
