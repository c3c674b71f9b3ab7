package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// This file is the effect ledger (docs/contract.md §7). Fencing protects the job row, not the
// outside world: an attempt whose lease expired may already have charged the card when its
// completion is rejected. Effect makes "at-least-once execution, effect applied once" the easy
// path: each named effect of a job has a stable key, job:{id}:effect:{name}, identical across
// attempts, generations and reclaims; the first attempt to record a result wins the ledger row
// and every later attempt gets that result back without running the effect again.

// MaxEffectResultBytes bounds an effect's recorded result, measured as the database measures
// it (bytes of jsonb text, generics.JSONSize): 64 KiB, the database's own bound
// (generics.MaxEffectResultBytes). Record ids and small receipts, not bodies.
const MaxEffectResultBytes = generics.MaxEffectResultBytes

// ErrEffectResultTooLarge is the cause of an *EffectRefusedError for a result larger than
// MaxEffectResultBytes.
var ErrEffectResultTooLarge = errors.New("tenure: effect result too large to record")

// ErrEffectResultRefused means an effect ran but its result could not be kept in the ledger: it
// does not encode as JSON, holds what a jsonb cannot (a NUL character, invalid UTF-8), or is
// larger than MaxEffectResultBytes. The ledger records the effect as applied all the same, so
// Tenure never runs it again for this job: the attempt that ran it gets its result in
// EffectResult.Value together with this error (as an *EffectRefusedError); every later attempt
// gets the error with a zero Value and Replayed set. A handler that needs the value later must
// keep something smaller (an id) as the effect's result.
var ErrEffectResultRefused = errors.New("tenure: effect ran, its result was not recorded")

// EffectRefusedError says which effect ran without its result recorded, and why. It matches
// ErrEffectResultRefused and, on the attempt that ran the effect, its cause (ErrEffectResultTooLarge,
// generics.ErrNULCharacter, generics.ErrInvalidUTF8, an encoding error).
type EffectRefusedError struct {
	Key    string
	Reason string // why the result was refused, as recorded in the ledger
	Err    error  // the cause, on the attempt that ran the effect; nil when read from the ledger
}

func (e *EffectRefusedError) Error() string {
	return fmt.Sprintf("%v: effect %q: %s", ErrEffectResultRefused, e.Key, e.Reason)
}

// Unwrap exposes ErrEffectResultRefused and the cause to errors.Is and errors.As.
func (e *EffectRefusedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrEffectResultRefused}
	}
	return []error{ErrEffectResultRefused, e.Err}
}

// EffectCall is what an effect function receives.
type EffectCall struct {
	// Key is the stable idempotency key: send it to the remote system (e.g. an
	// Idempotency-Key header) so a repeated call is applied once.
	Key string
	// Generation is the fencing number of this attempt; systems that can reject stale writers
	// should refuse a generation lower than one they have seen. With the default durable
	// engine commits a generation is handed out at most once. With
	// Config.AsynchronousCommit a database crash can hand the same generation to two attempts
	// (docs/guide.md §7): such a remote must then also refuse a second, different ClaimToken
	// for a generation it has already seen.
	Generation int64
	// ClaimToken identifies this attempt; it never repeats.
	ClaimToken uuid.UUID
	JobID      int64
	Attempt    int
}

// EffectResult is a recorded effect.
type EffectResult[T any] struct {
	Value T
	// Replayed is true when the value came from the ledger (an earlier attempt ran the effect).
	Replayed bool
	// Generation is the generation of the attempt that produced the value.
	Generation int64
}

// Effect runs the named external effect of job at most once per job, as far as the ledger
// can tell: if the ledger holds a record for the effect's key, its result is returned without
// calling fn; otherwise fn runs with the key and the fencing generation, and its result is
// recorded with this attempt's generation. Recording is fenced twice: only the job's current
// owner may write, and a stale generation never overwrites a newer record. When the record is
// refused, Effect returns a *StaleWriteError (errors.Is ErrLostOwnership): the handler should
// return it.
//
// A result that cannot be kept (see ErrEffectResultRefused) is checked by the database's own
// rules before anything is written, and the effect is recorded as applied without it: Effect
// returns the value with an *EffectRefusedError, and never runs fn again for this job.
//
// Between fn's remote success and the ledger write a crash can happen; the next attempt then
// calls fn again with the same key, so the remote must deduplicate by Key for exactly-once.
// Call Effect from the job's handler, with the handler's context.
// Handlers run by another engine (package tenurenats) use that engine's ledger instead, when
// it put the attempt in the context with WithExternalAttempt.
func Effect[T any](ctx context.Context, job *generics.JobRow, name string,
	fn func(ctx context.Context, call EffectCall) (T, error)) (EffectResult[T], error) {
	e := engine.ExecutionFrom(ctx)
	meta := job
	if !e.Owns(job) {
		a := externalAttempt(ctx, meta)
		if a == nil {
			return EffectResult[T]{}, ErrNotInHandler
		}
		if err := checkEffectName(name); err != nil {
			return EffectResult[T]{}, err
		}
		return runEffect(ctx, a.KeyPrefix+generics.EffectKey(meta.ID, name), meta, fn, externalLedger{a: a, name: name}) // external.go
	}
	if err := checkEffectName(name); err != nil {
		return EffectResult[T]{}, err
	}
	key := e.Engine().EffectKeyPrefix() + generics.EffectKey(meta.ID, name)
	return runEffect(ctx, key, meta, fn, jobLedger{e: e, name: name})
}

func checkEffectName(name string) error {
	if name == "" || utf8.RuneCountInString(name) > generics.MaxNameChars || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: effect name must be 1..%d characters of valid UTF-8 without NUL", ErrInvalidConfig, generics.MaxNameChars)
	}
	return nil
}

// ledgerRecord is what an effect ledger holds for one key.
type ledgerRecord struct {
	result     []byte
	generation int64
	refused    string // non-empty: the effect ran, its result was not kept
}

// effectLedger is one engine's ledger: tenure.effects for this package's jobs (jobLedger),
// another engine's for its attempts (externalLedger, external.go).
type effectLedger interface {
	// get returns the record of key, ok false when there is none.
	get(ctx context.Context, key string, meta *generics.JobRow) (rec ledgerRecord, ok bool, err error)
	// record writes rec for key and returns the record that holds (rec, or one an earlier
	// or newer attempt wrote).
	record(ctx context.Context, key string, meta *generics.JobRow, rec ledgerRecord) (ledgerRecord, error)
}

// runEffect is Effect on a ledger: replay a record, or run fn and record what it returned,
// or, when that cannot be kept, that it ran.
func runEffect[T any](ctx context.Context, key string, meta *generics.JobRow,
	fn func(ctx context.Context, call EffectCall) (T, error), l effectLedger) (EffectResult[T], error) {
	var out EffectResult[T]
	if rec, ok, err := l.get(ctx, key, meta); err != nil {
		return out, err
	} else if ok {
		return replay[T](key, rec)
	}
	v, err := fn(ctx, EffectCall{Key: key, Generation: meta.Generation, ClaimToken: derefUUID(meta.ClaimToken), JobID: meta.ID, Attempt: meta.Attempt})
	if err != nil {
		return out, err
	}
	// The database's rules, before anything is written: a result the ledger would refuse is
	// replaced by a record that the effect ran.
	rec := ledgerRecord{generation: meta.Generation}
	var cause error
	raw, err := json.Marshal(v)
	if err == nil {
		err = generics.CheckJSON("effect result", raw, MaxEffectResultBytes)
		if errors.Is(err, generics.ErrTooLarge) {
			err = fmt.Errorf("%w: %w", ErrEffectResultTooLarge, err)
		}
	} else {
		err = fmt.Errorf("encode result: %w", err)
	}
	if err != nil {
		cause = err
		rec.result, rec.refused = jsonNull, engine.CleanMessage(err.Error())
	} else {
		rec.result = raw
	}
	// The record must land even if the handler's context was cancelled meanwhile: the effect
	// happened, and the ledger's own fencing decides whether this attempt may still write.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	held, err := l.record(rctx, key, meta, rec)
	if err != nil {
		return out, err
	}
	if held.generation != meta.Generation {
		// A concurrent attempt (a redelivery while this one ran) recorded first: its record holds.
		return replay[T](key, held)
	}
	out.Value, out.Generation = v, meta.Generation
	if cause != nil {
		return out, &EffectRefusedError{Key: key, Reason: rec.refused, Err: cause}
	}
	return out, nil
}

// replay returns what a ledger record says of an effect that ran before.
func replay[T any](key string, rec ledgerRecord) (EffectResult[T], error) {
	out := EffectResult[T]{Replayed: true, Generation: rec.generation}
	if rec.refused != "" {
		return out, &EffectRefusedError{Key: key, Reason: rec.refused}
	}
	if err := json.Unmarshal(rec.result, &out.Value); err != nil {
		return out, fmt.Errorf("tenure: effect %q: recorded result does not decode: %w", key, err)
	}
	return out, nil
}

// jobLedger is the ledger of the attempt running in the handler's context: the engine's
// Execution reads and records its effects (engine/effect.go), fenced by the claim token.
type jobLedger struct {
	e    *engine.Execution
	name string
}

func (l jobLedger) get(ctx context.Context, key string, meta *generics.JobRow) (ledgerRecord, bool, error) {
	rec, ok, err := l.e.GetEffect(ctx, key, l.name, meta)
	return ledgerRecord{result: rec.Result, generation: rec.Generation, refused: rec.Refused}, ok, err
}

func (l jobLedger) record(ctx context.Context, key string, meta *generics.JobRow, rec ledgerRecord) (ledgerRecord, error) {
	held, err := l.e.RecordEffect(ctx, key, l.name, meta, engine.LedgerRecord{Result: rec.result, Generation: rec.generation, Refused: rec.refused})
	return ledgerRecord{result: held.Result, generation: held.Generation, refused: held.Refused}, err
}

func optString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// jsonNull is the ledger's result of an effect whose result was refused.
var jsonNull = []byte("null")

func derefUUID(u *uuid.UUID) uuid.UUID {
	if u == nil {
		return uuid.Nil
	}
	return *u
}
