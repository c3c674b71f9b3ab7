package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/logkey"
)

// Execution is one claimed attempt, from dispatch until its fenced finish is settled.
//
// Ownership: the queue loop that claimed it owns every plain field below; the handler
// goroutine only reads c, h and ctx and reports its result over the loop's channel; finishers
// read fin after the loop handed them the execution. The atomics are the only state
// other goroutines touch, each written by one side.
type Execution struct {
	c   claimed
	q   *queue
	h   *Handler // nil when no handler is registered for the kind
	ctx context.Context
	// end ends ctx with a cause (lease lost, cancel, stop, timeout): e.cancel. For a batch
	// kind's job, batch is the running batch call it belongs to (set by the batch goroutine),
	// told when ctx ends (batchCall.jobEnded).
	end   context.CancelCauseFunc
	batch atomic.Pointer[batchCall]
	start time.Time

	leaseUntil  atomic.Int64           // unix nanos, local estimate of the lease end; loop writes, finishers read
	output      atomic.Pointer[[]byte] // SetOutput (handler side) writes; finishers and CompleteTx read
	txCompleted atomic.Bool            // CompleteTx changed the row inside the handler's transaction
	txDeleted   atomic.Bool            // that change was a delete (DeleteOnSuccess); txXid is its transaction
	txXid       atomic.Int64           // txid_current of the handler's transaction that ran CompleteTx
	finishFails atomic.Int32           // failed finish writes so far; finishers write, the loop reads
	prog        progressState          // Progress (progress.go)

	// Owned by the queue loop.
	nextHB    time.Time
	hbFails   int
	returned  bool // the handler returned; its finish is pending or with the finishers
	stuck     bool // past timeout + StuckGrace: slot given back, no more heartbeats
	leaseLost bool
	released  bool   // given back by Stop before its handler returned; a late return is dropped
	limited   bool   // a concurrency limit covers its kind and it was claimed near the limit (limits.go); set by the loop when the claim returns
	waiting   bool   // claimed ahead, waiting for a slot: no handler, no timeout yet (ahead.go)
	fin       finish // the write to make; set by the loop before the finishers get it
	// Set by the loop before the finishers get it (claim.go, "Completions ride on claims"):
	// rideFailed, its completion rode on a claim that failed, which may have committed although
	// its reply was lost, so the finishers read the row back before calling a write that changes
	// nothing stale; lingered, it already waited FinishLinger for a claim to carry it, so the
	// finishers write it without lingering again.
	rideFailed, lingered bool
}

// transition is the fenced write a finish makes.
type transition int

const (
	toSucceeded transition = iota
	toRetry
	toDead
	toCancelled
	toRelease
	toSnooze
)

func (t transition) String() string {
	// The Outcome* names (metrics.go): one word per transition everywhere (outcomes, logs, metrics).
	return [...]string{OutcomeSucceeded, OutcomeRetried, OutcomeDead, OutcomeCancelled, OutcomeReleased, OutcomeSnoozed}[t]
}

type finish struct {
	to    transition
	code  ErrorCode
	msg   string
	delay time.Duration
	err   error // the handler's error, for the outcome hook
}

// cancel ends e's context with cause (lease lost, cancel, stop, timeout; nil: the attempt is
// over). A batch job's running call is told (batchCall.jobEnded: the batch context ends
// when every job's context has).
func (e *Execution) cancel(cause error) {
	e.end(cause)
	if b := e.batch.Load(); b != nil {
		b.jobEnded(e)
	}
}

// deleteOnSuccess reports whether e's success deletes its row (HandlerOptions.DeleteOnSuccess).
func (e *Execution) deleteOnSuccess() bool {
	return e.h != nil && e.h.opts.DeleteOnSuccess
}

// execKey is the one context key of a running attempt: the handler's context (and a batch
// job's own context) carries its Execution, which the handler-side helpers of package worker
// (Progress, SetOutput, Effect, CompleteTx, DependencyOutput) reach through ExecutionFrom.
type execKey struct{}

// ExecutionFrom returns the attempt running in ctx, nil outside a running handler.
func ExecutionFrom(ctx context.Context) *Execution {
	e, _ := ctx.Value(execKey{}).(*Execution)
	return e
}

// Job returns the attempt's row, the one its handler sees.
func (e *Execution) Job() *generics.JobRow { return e.c.JobRow }

// Owns reports whether job is e's attempt (same job, same claim token); e may be nil.
func (e *Execution) Owns(job *generics.JobRow) bool { return e.owns(job) }

// Engine returns the engine running the attempt.
func (e *Execution) Engine() *Engine { return e.q.w }

// EffectKeyPrefix returns the engine's Config.EffectKeyPrefix.
func (w *Engine) EffectKeyPrefix() string { return w.cfg.EffectKeyPrefix }

// Registry returns the kind registry (payloads decode with it).
func (e *Execution) Registry() *generics.Registry { return e.q.w.reg }

// LogPanic counts a panic of the application's code outside its handler call (a payload
// upgrader) and logs it with the attempt's attributes.
func (e *Execution) LogPanic(msg string, r any, stack []byte) {
	e.q.w.m.Panics.Add(1)
	e.q.w.log.Error(msg, e.c.logAttrs("panic", r, "stack", string(stack))...)
}

// defaultTimeout is the attempt timeout of a kind without a handler here (worker's default
// HandlerOptions.Timeout).
const defaultTimeout = time.Minute

// versionDeferDelay is how long a job whose payload version is newer than this worker knows
// waits before it is due again (a rolling deploy: a newer worker will take it meanwhile).
const versionDeferDelay = 30 * time.Second

// owns reports whether job is e's attempt (same job, same claim token): the check of the
// helpers a handler calls with its job (CompleteTx, Effect). e may be nil (not in a handler).
func (e *Execution) owns(job *generics.JobRow) bool {
	return e != nil && job != nil && e.c.ID == job.ID && job.ClaimToken != nil && *job.ClaimToken == e.c.token
}

// newExecution prepares the attempt the claim returned; the queue loop starts it (dispatch).
func (q *queue) newExecution(c *claimed, wait bool) *Execution {
	w := q.w
	e := &Execution{c: *c, q: q, h: w.handlers[c.Kind], start: time.Now()}
	if la := q.limits; la != nil {
		e.limited = la.concurrencyLimited[""] || la.concurrencyLimited[c.Kind]
	}
	e.leaseUntil.Store(e.start.Add(c.Lease).UnixNano())
	e.nextHB = e.start.Add(c.Lease / time.Duration(w.cfg.HeartbeatDivisor))
	base, cancel := context.WithCancelCause(w.base)
	if e.h != nil && e.h.batch != nil {
		// A batch job's deadline is its batch's (the kind's timeout from the batch's start:
		// batch.go); its own context carries only its cancellation. No handler sees it: the
		// handler gets the job's context from JobContext, which carries the execution.
		e.ctx, e.end, e.waiting = base, cancel, wait
		return e
	}
	e.ctx, e.end = context.WithValue(base, execKey{}, e), cancel
	if wait {
		e.waiting = true // claimed ahead: begin runs when a slot frees (ahead.go)
		return e
	}
	e.begin(e.start)
	return e
}

// begin starts the clock of e's attempt at now: the stuck deadline counts from it (e.start),
// and a single handler's timeout. A job claimed ahead begins when a slot frees (ahead.go),
// every other one as it is claimed.
func (e *Execution) begin(now time.Time) {
	e.start = now
	if e.h != nil && e.h.batch != nil {
		return // its batch's start sets both (batch.go)
	}
	timeout := defaultTimeout
	if e.h != nil {
		timeout = e.h.opts.Timeout
	}
	ctx, cancelTimeout := context.WithTimeoutCause(e.ctx, timeout, ErrHandlerTimeout)
	end := e.end
	e.ctx = ctx
	e.end = func(cause error) { end(cause); cancelTimeout() }
}

// dispatch starts e's handler on a handler goroutine: an idle one if one waits, else a new
// one. A handler goroutine that reported its result waits for the queue's next execution
// until the queue loop returns. Reusing them saves, per job, a goroutine's start and above
// all the growth of its stack from the minimum to what a handler needs (JSON decoding alone
// grows it several times, each a copy of the whole stack): the goroutines that keep running
// keep their stacks. A handler that never returns keeps its goroutine, as before; the
// goroutines are never more than the handlers that ran at the same time.
func (q *queue) dispatch(e *Execution) {
	select {
	case q.runCh <- e:
	default:
		go q.runner(e)
	}
}

// runner is a handler goroutine: it runs e, then each execution the loop hands it, until the
// loop returns.
func (q *queue) runner(e *Execution) {
	for e != nil {
		q.run(e)
		e = awaitNext(q, q.runCh)
	}
}

// idleStackReserve is the stack an idle handler goroutine holds while it waits (await). The
// garbage collector halves the stack of a goroutine that uses less than a quarter of it; an
// idle goroutine parked at the top of its stack would lose, GC after GC, the stack its
// handlers grew, and the next handler would grow it again, copying it each time (most of it
// in JSON decoding). Waiting below this reserve keeps stacks up to four times its size.
const idleStackReserve = 4 << 10

// awaitNext is what a reused goroutine of the queue (a handler's, a claim's, a batch call's)
// does while idle: it waits for the next piece of work the loop hands it on ch, below its
// idle stack reserve; the zero value when the loop returned.
//
//go:noinline
func awaitNext[T any](q *queue, ch <-chan T) T {
	var reserve [idleStackReserve]byte
	holdStack(&reserve)
	select {
	case v := <-ch:
		return v
	case <-q.done:
		var zero T
		return zero
	}
}

// holdStack keeps its argument's frame allocated (it does nothing else).
//
//go:noinline
func holdStack(*[idleStackReserve]byte) {}

// run runs one handler and reports the finish to the queue loop. It touches no engine state.
// If the loop is gone (Stop's deadline passed) the result is dropped: the job was released by
// Stop, or its lease will expire.
func (q *queue) run(e *Execution) {
	f := q.w.runHandler(e)
	e.cancel(nil)
	q.w.m.HandlersRunning.Add(-1)
	select {
	case q.returnedCh <- handlerResult{e: e, fin: f}:
	case <-q.done:
	}
}

// runHandler runs the handler, recovering a panic, and decides the job's next state.
func (w *Engine) runHandler(e *Execution) (f finish) {
	defer func() {
		if r := recover(); r != nil {
			w.m.Panics.Add(1)
			w.log.Error("tenure: handler panicked", e.c.logAttrs("panic", r, "stack", string(debug.Stack()))...)
			f = w.failure(e, CodePanic, 0, fmt.Errorf("panic: %v", r))
		}
	}()
	if e.h == nil {
		// The claim only takes registered kinds; this is a kind registered on another worker
		// sharing this one's ID, or a bug. Give it back rather than fail it.
		return w.deferJob(e, fmt.Errorf("no handler registered for kind %q on worker %s", e.c.Kind, w.cfg.ID))
	}
	return w.outcome(e.ctx, e, e.h.run(e.ctx, e))
}

// outcome decides the next state of e's job from what its handler returned (err) and its
// context ctx (the handler's, or a batch job's own: batch.go): success, deferral, cancel,
// release at stop, snooze, or a classified failure.
func (w *Engine) outcome(ctx context.Context, e *Execution, err error) finish {
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		return finish{to: toSucceeded}
	case errors.Is(err, generics.ErrUnsupportedVersion):
		return w.deferJob(e, err)
	case errors.Is(cause, ErrJobCancelled):
		return finish{to: toCancelled, code: CodeCancelled, msg: CleanMessage(err.Error()), err: err}
	case errors.Is(cause, ErrWorkerStopping):
		return finish{to: toRelease, err: err}
	}
	v := ClassifyError(ctx, err)
	if v.Snooze {
		if e.c.Snoozes < e.h.opts.MaxSnoozes {
			return finish{to: toSnooze, delay: v.SnoozeDelay, err: err}
		}
		return w.failure(e, CodeSnoozeLimit, 0, fmt.Errorf("snoozed %d times, the kind's MaxSnoozes: %w", e.c.Snoozes, err))
	}
	code, delay := v.Code, v.Delay
	if delay > 0 && e.q != nil && e.q.limits != nil {
		w.flowBlock(e, delay) // RetryAfter: pause the job's limit groups too (limits.go)
	}
	return w.failure(e, code, delay, err)
}

// deferJob gives a job this worker cannot run yet back to ready without charging the
// attempt, due again after versionDeferDelay (with jitter), logged once per kind.
func (w *Engine) deferJob(e *Execution, err error) finish {
	w.m.Deferred.Add(1)
	if _, seen := w.deferLogged.LoadOrStore(e.c.Kind, true); !seen {
		w.log.Warn("tenure: job deferred: this worker cannot run its payload yet (logged once per kind)",
			e.c.logAttrs(logkey.PayloadVersion, e.c.PayloadVersion, logkey.Err, err)...)
	}
	d := versionDeferDelay/2 + time.Duration(rand.Int64N(int64(versionDeferDelay)))
	return finish{to: toRelease, delay: d, err: err}
}

// failure turns a classified error into retry or dead.
func (w *Engine) failure(e *Execution, code ErrorCode, delay time.Duration, err error) finish {
	w.m.recordCode(code)
	f := finish{code: code, msg: CleanMessage(err.Error()), err: err}
	switch {
	case code == CodeCancelled:
		f.to = toCancelled
	case code.Permanent() || e.c.Attempt >= e.c.MaxAttempts:
		f.to = toDead
	default:
		f.to = toRetry
		if delay <= 0 {
			delay = w.retryPolicy(e.c.Kind)(e.c.Attempt, code)
		}
		f.delay = delay
	}
	return f // logged once its fenced write lands (queue.settle)
}

func (w *Engine) retryPolicy(kind string) func(attempt int, code ErrorCode) time.Duration {
	if h := w.handlers[kind]; h != nil {
		return h.opts.Retry
	}
	return DefaultRetry
}

// maxErrorMessage bounds the message stored in a job's error history (bytes), the ellipsis of
// a cut message included.
const maxErrorMessage = generics.MaxErrorMessageBytes

// CleanMessage makes an error message storable, whatever the handler put in it: valid UTF-8,
// no NUL (PostgreSQL text cannot hold it), at most maxErrorMessage bytes, never split inside
// a character. Every message goes through it before any write.
func CleanMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= maxErrorMessage {
		return s
	}
	cut := maxErrorMessage - len("…")
	for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}
