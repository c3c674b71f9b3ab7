package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenureq/tenure/generics"
)

// This file lets another engine run the handlers this package runs, Effect included: package
// tenurenats consumes jobs from NATS JetStream and hands them to the same
// func(ctx, *generics.Job[A]) error handlers. There is no job row to fence on there, so the
// engine brings its own ledger and states the attempt's identity in the handler's context.

// EffectRecord is one effect result to record in an ExternalLedger.
type EffectRecord struct {
	Key        string // the effect's full key (prefix included), as EffectCall.Key
	JobID      int64
	Name       string
	Generation int64
	Result     json.RawMessage
}

// ExternalLedger is the effect ledger of an engine other than this package's (see
// WithExternalAttempt).
type ExternalLedger interface {
	// GetEffect returns the recorded result for key and the generation that produced it;
	// ok is false when nothing is recorded.
	GetEffect(ctx context.Context, key string) (result json.RawMessage, generation int64, ok bool, err error)
	// RecordEffect records rec unless key already has a record; it returns the record that
	// holds (rec's, or the one an earlier attempt wrote first).
	RecordEffect(ctx context.Context, rec EffectRecord) (result json.RawMessage, generation int64, err error)
}

// ExternalAttempt identifies a handler attempt run by another engine, for Effect.
type ExternalAttempt struct {
	Job generics.JobMeta // must equal the job.Meta() the handler passes to Effect (ID, ClaimToken)
	// KeyPrefix is put in front of generics.EffectKey(Job.ID, name); it must keep the keys
	// apart from this package's (whose ids are tenure.jobs ids).
	KeyPrefix string
	Ledger    ExternalLedger
}

type externalKey struct{}

// WithExternalAttempt returns ctx under which Effect, called with a job whose Meta has a.Job's
// ID and ClaimToken, records and replays through a.Ledger instead of tenure.effects. Engines
// call it before they run a handler; handlers need not know which engine runs them.
// CompleteTx still returns ErrNotInHandler under such a context: there is no job row to
// complete in the caller's transaction.
func WithExternalAttempt(ctx context.Context, a ExternalAttempt) context.Context {
	return context.WithValue(ctx, externalKey{}, &a)
}

func externalAttempt(ctx context.Context, meta generics.JobMeta) *ExternalAttempt {
	a, _ := ctx.Value(externalKey{}).(*ExternalAttempt)
	if a == nil || a.Ledger == nil || a.Job.ID != meta.ID || a.Job.ClaimToken != meta.ClaimToken || meta.ClaimToken == uuid.Nil {
		return nil
	}
	return a
}

// externalEffect is Effect for an attempt another engine runs: the ledger's first record wins.
func externalEffect[T any](ctx context.Context, a *ExternalAttempt, meta generics.JobMeta, name string,
	fn func(ctx context.Context, call EffectCall) (T, error)) (EffectResult[T], error) {
	var out EffectResult[T]
	key := a.KeyPrefix + generics.EffectKey(meta.ID, name)
	raw, gen, ok, err := a.Ledger.GetEffect(ctx, key)
	if err != nil {
		return out, err
	}
	if ok {
		if err := json.Unmarshal(raw, &out.Value); err != nil {
			return out, fmt.Errorf("tenure: effect %q: recorded result does not decode: %w", key, err)
		}
		out.Replayed, out.Generation = true, gen
		return out, nil
	}
	v, err := fn(ctx, EffectCall{Key: key, Generation: meta.Generation, ClaimToken: meta.ClaimToken, JobID: meta.ID, Attempt: meta.Attempt})
	if err != nil {
		return out, err
	}
	enc, err := json.Marshal(v)
	if err != nil {
		return out, fmt.Errorf("tenure: effect %q: encode result: %w", key, err)
	}
	if len(enc) > MaxEffectResultBytes {
		return out, fmt.Errorf("%w: %q: %d bytes", ErrEffectResultTooLarge, key, len(enc))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	stored, storedGen, err := a.Ledger.RecordEffect(rctx, EffectRecord{Key: key, JobID: meta.ID, Name: name, Generation: meta.Generation, Result: enc})
	if err != nil {
		return out, err
	}
	if storedGen != meta.Generation {
		// A concurrent attempt (a redelivery while this one ran) recorded first: its result holds.
		if err := json.Unmarshal(stored, &out.Value); err != nil {
			return out, fmt.Errorf("tenure: effect %q: recorded result does not decode: %w", key, err)
		}
		out.Replayed, out.Generation = true, storedGen
		return out, nil
	}
	out.Value, out.Generation = v, meta.Generation
	return out, nil
}

// Classify maps a handler's result and its context to the error code and the explicit retry
// delay (0: use the retry policy) exactly as this engine does: a *JobError's code (Permanent,
// RetryAfter, WithCode), TIMEOUT when the context ended with ErrHandlerTimeout, LEASE_EXPIRED
// with ErrLeaseLost, else HANDLER_ERROR. For other engines running the same handlers.
func Classify(ctx context.Context, err error) (ErrorCode, time.Duration) { return classify(ctx, err) }
