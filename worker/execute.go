package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// execution is the engine's state of one claimed attempt, from dispatch until its fenced
// finish is confirmed (or rejected).
type execution struct {
	c     claimed
	q     *queueRunner
	h     *handler // nil when no handler is registered for the kind
	ctx   context.Context
	stop  context.CancelCauseFunc
	start time.Time

	leaseUntil atomic.Int64 // unix nanos, local estimate of the lease end (claim/heartbeat + lease)
	nextHB     time.Time    // heartbeat goroutine only
	hbFails    int          // heartbeat goroutine only

	slotFreed   atomic.Bool // the queue slot was given back (handler returned, or declared stuck)
	handlerDone atomic.Bool
	stuck       atomic.Bool
	leaseLost   atomic.Bool
	txCompleted atomic.Bool // CompleteTx changed the row inside the handler's transaction
	released    atomic.Bool // Stop gave the job back; any later finish is moot

	fin finish // set once, by the handler goroutine, before the execution goes to the finisher
}

// transition is the fenced write a finish makes.
type transition int

const (
	toSucceeded transition = iota
	toRetry
	toDead
	toCancelled
	toRelease
)

func (t transition) String() string {
	return [...]string{"succeeded", "retry", "dead", "cancelled", "release"}[t]
}

type finish struct {
	to    transition
	code  ErrorCode
	msg   string
	delay time.Duration
	err   error // the handler's error, for the outcome hook
}

type execKey struct{}

func (w *Worker) dispatch(q *queueRunner, c *claimed) {
	e := &execution{c: *c, q: q, h: w.handlers[c.kind], start: time.Now()}
	e.leaseUntil.Store(e.start.Add(c.lease).UnixNano())
	e.nextHB = e.start.Add(c.lease / time.Duration(w.cfg.HeartbeatDivisor))
	timeout := defaultTimeout
	if e.h != nil {
		timeout = e.h.opts.Timeout
	}
	base, cancel := context.WithCancelCause(w.handlerBase)
	ctx, cancelTimeout := context.WithTimeoutCause(base, timeout, ErrHandlerTimeout)
	e.ctx = context.WithValue(ctx, execKey{}, e)
	e.stop = func(cause error) { cancel(cause); cancelTimeout() }

	w.activeMu.Lock()
	w.active[c.id] = e
	w.activeMu.Unlock()
	w.handlersWG.Add(1)
	go w.execute(e)
}

func (w *Worker) execute(e *execution) {
	defer w.handlersWG.Done()
	f := w.runHandler(e)
	e.handlerDone.Store(true)
	e.stop(nil)
	if e.released.Load() { // Stop gave the job back already; this result is moot
		if e.slotFreed.CompareAndSwap(false, true) {
			e.q.releaseSlot()
		}
		return
	}
	if e.slotFreed.CompareAndSwap(false, true) {
		e.q.handlerReturned()
	} else {
		e.q.finishingStuck()
	}
	if e.stuck.Load() {
		// The engine gave up on this attempt at timeout+grace; whatever the handler says now
		// is fenced out as a timeout.
		w.m.lateFinishes.Add(1)
		f = w.failure(e, CodeTimeout, 0, fmt.Errorf("handler returned %v after it was declared stuck (result discarded)", time.Since(e.start).Round(time.Millisecond)))
	}
	e.fin = f
	w.enqueueFinish(e)
}

// runHandler runs the handler, recovering a panic, and decides the job's next state.
func (w *Worker) runHandler(e *execution) (f finish) {
	defer func() {
		if r := recover(); r != nil {
			w.m.panics.Add(1)
			w.log.Error("tenure: handler panicked", "job_id", e.c.id, "kind", e.c.kind, "panic", r, "stack", string(debug.Stack()))
			f = w.failure(e, CodePanic, 0, fmt.Errorf("panic: %v", r))
		}
	}()
	if e.h == nil {
		return w.failure(e, CodeUnknownKind, 0, fmt.Errorf("no handler registered for kind %q on worker %s", e.c.kind, w.cfg.ID))
	}
	err := e.h.run(e.ctx, e)
	cause := context.Cause(e.ctx)
	switch {
	case err == nil:
		return finish{to: toSucceeded}
	case errors.Is(cause, ErrJobCancelled):
		return finish{to: toCancelled, code: CodeCancelled, msg: truncate(err.Error()), err: err}
	case errors.Is(cause, ErrWorkerStopping):
		return finish{to: toRelease, err: err}
	}
	code, delay := classify(e.ctx, err)
	return w.failure(e, code, delay, err)
}

// failure turns a classified error into retry or dead.
func (w *Worker) failure(e *execution, code ErrorCode, delay time.Duration, err error) finish {
	w.m.recordCode(code)
	f := finish{code: code, msg: truncate(err.Error()), err: err}
	switch {
	case code == CodeCancelled:
		f.to = toCancelled
	case code.Permanent() || e.c.attempt >= e.c.maxAttempts:
		f.to = toDead
	default:
		f.to = toRetry
		if delay <= 0 {
			delay = w.retryPolicy(e.c.kind).Delay(e.c.attempt, code)
		}
		f.delay = delay
	}
	if f.to != toCancelled {
		w.log.Warn("tenure: job attempt failed", "job_id", e.c.id, "kind", e.c.kind, "attempt", e.c.attempt,
			"code", code, "next", f.to.String(), "delay", f.delay, "err", err)
	}
	return f
}

func (w *Worker) retryPolicy(kind string) RetryPolicy {
	if h := w.handlers[kind]; h != nil {
		return h.opts.Retry
	}
	return FullJitter{}
}

// forget drops an execution from the active set; its finish is settled (or moot).
func (w *Worker) forget(e *execution) {
	w.activeMu.Lock()
	mine := w.active[e.c.id] == e
	if mine {
		delete(w.active, e.c.id)
	}
	w.activeMu.Unlock()
	if mine && e.handlerDone.Load() {
		e.q.finished()
	}
}

const maxErrorMessage = 2000

func truncate(s string) string {
	if len(s) <= maxErrorMessage {
		return s
	}
	cut := maxErrorMessage
	for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}
