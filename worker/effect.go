package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
)

// This file is the effect ledger (docs/contract.md §7). Fencing protects the job row, not the
// outside world: an attempt whose lease expired may already have charged the card when its
// completion is rejected. Effect makes "at-least-once execution, effect applied once" the easy
// path: each named effect of a job has a stable key, job:{id}:effect:{name}, identical across
// attempts, generations and reclaims; the first attempt to record a result wins the ledger row
// and every later attempt gets that result back without running the effect again.

// MaxEffectResultBytes bounds an encoded effect result (64 KiB). Record ids and small
// receipts, not bodies.
const MaxEffectResultBytes = 64 << 10

// ErrEffectResultTooLarge means an effect's result could not be recorded because it encodes
// to more than MaxEffectResultBytes. The effect itself ran; a retry runs it again with the same
// key, so the remote's idempotency still holds.
var ErrEffectResultTooLarge = errors.New("tenure: effect result too large to record")

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
// can tell: if the ledger holds a result for the effect's key, it is returned without calling
// fn; otherwise fn runs with the key and the fencing generation, and its result is recorded
// with this attempt's generation. Recording is fenced twice: only the job's current owner may
// write, and a stale generation never overwrites a newer record. When the record is refused,
// Effect returns a *StaleWriteError (errors.Is ErrLostOwnership): the handler should return it.
//
// Between fn's remote success and the ledger write a crash can happen; the next attempt then
// calls fn again with the same key, so the remote must deduplicate by Key for exactly-once.
// Call Effect from the job's handler, with the handler's context.
// Handlers run by another engine (package tenurenats) use that engine's ledger instead, when
// it put the attempt in the context with WithExternalAttempt.
func Effect[T any](ctx context.Context, job generics.AnyJob, name string,
	fn func(ctx context.Context, call EffectCall) (T, error)) (EffectResult[T], error) {
	var out EffectResult[T]
	e, _ := ctx.Value(execKey{}).(*execution)
	meta := job.Meta()
	if e == nil || e.c.ID != meta.ID || e.c.ClaimToken != meta.ClaimToken {
		a := externalAttempt(ctx, meta)
		if a == nil {
			return out, ErrNotInHandler
		}
		if name == "" || len(name) > 200 {
			return out, fmt.Errorf("%w: effect name must be 1..200 bytes", ErrInvalidConfig)
		}
		return externalEffect(ctx, a, meta, name, fn) // another engine runs the handler (external.go)
	}
	if name == "" || len(name) > 200 {
		return out, fmt.Errorf("%w: effect name must be 1..200 bytes", ErrInvalidConfig)
	}
	w := e.q.w
	q := gen.New(w.pool)
	key := w.cfg.EffectKeyPrefix + generics.EffectKey(meta.ID, name)
	// The ledger read fails at once on a context the engine cancelled for a lost lease, and
	// whenever the cancellation lands before it returns: one check after it covers both, and fn
	// never runs for a job this attempt no longer owns.
	if rec, err := q.GetEffect(ctx, key); leaseLostErr(e.ctx, err) {
		return out, &StaleWriteError{JobID: meta.ID, Generation: meta.Generation, Transition: "effect " + name}
	} else if err == nil {
		if err := json.Unmarshal(rec.Result, &out.Value); err != nil {
			return out, fmt.Errorf("tenure: effect %q: recorded result does not decode: %w", key, err)
		}
		out.Replayed, out.Generation = true, rec.Generation
		return out, nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return out, err
	}
	v, err := fn(ctx, EffectCall{Key: key, Generation: meta.Generation, ClaimToken: meta.ClaimToken, JobID: meta.ID, Attempt: meta.Attempt})
	if err != nil {
		return out, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return out, fmt.Errorf("tenure: effect %q: encode result: %w", key, err)
	}
	if len(raw) > MaxEffectResultBytes {
		return out, fmt.Errorf("%w: %q: %d bytes", ErrEffectResultTooLarge, key, len(raw))
	}
	// The record must land even if the handler's context was cancelled meanwhile: the effect
	// happened, and the ledger's own fencing decides whether this attempt may still write.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err = q.RecordEffect(rctx, gen.RecordEffectParams{Key: key, JobID: meta.ID, Name: name,
		Generation: meta.Generation, Result: raw, ClaimToken: meta.ClaimToken})
	if errors.Is(err, pgx.ErrNoRows) {
		w.m.staleRejected.Add(1)
		return out, &StaleWriteError{JobID: meta.ID, Generation: meta.Generation, Transition: "effect " + name}
	}
	if err != nil {
		return out, err
	}
	out.Value, out.Generation = v, meta.Generation
	return out, nil
}
