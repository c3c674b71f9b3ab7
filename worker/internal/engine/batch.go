package engine

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/logkey"
)

// This file is batch handlers (RegisterBatch): one handler call for many jobs of one kind.
//
// A batch is formed by the queue loop from what its ordinary claims return (no claim statement
// of its own: a claim takes up to the queue's free slots, at most MaxClaimBatch, of every kind
// the worker runs, so a claim of 100 slots on a queue of one batch kind returns up to 100 jobs
// of it in one statement). Each claimed job of a batch kind is an execution of its own, exactly
// as a single handler's: in the loop's active set from its claim, holding one handler slot,
// heartbeated (leases per job), finished on its own by the finishers with a fenced write (id +
// claim token + generation). Only the handler call is shared.
//
// Who owns what:
//   - the queue loop owns the forming batches (queue.forming, one per kind): it appends each
//     claimed job of a batch kind (collect) and starts the batch's goroutine (startBatch) when
//     it holds MaxSize jobs, when MaxWait has passed since its first job was claimed, or when the
//     queue holds every slot it may (running == Concurrency, or the owned cap), since no claim
//     can add to it then. At Stop the forming batches' jobs are released at once, attempts not
//     charged, as jobs claimed while stopping are (releaseForming).
//   - the batch goroutine (runBatch) owns the batch call: it decodes each job's payload, builds
//     the batch context, calls the handler, maps its results to one finish per job (outcome,
//     the single handler's rules) and reports them to the loop in one message over returnedCh
//     (the loop takes them as a handler goroutine's one result each, in one turn, so the next
//     claim takes every slot the batch freed at once).
//
// Contexts: the batch's context carries the kind's timeout, counted from the batch's start. It
// is not cancelled when one job's own context ends (its lease is lost, an operator cancels it):
// that job's context (JobContext, made when the handler first asks for it) is, and that job's
// finish follows its cause (cancelled, or a fenced write the database refuses). The batch
// context ends when every job's own context has ended (the hard stop cancels them all: each
// job's e.cancel tells the call, batchCall.jobEnded), or at the timeout. A job whose own context ended
// while its batch was forming is not passed to the handler; it finishes as a handler returning
// its context's cause would.

// batchSpec is a batch kind's handler (handler.batch).
type batchSpec struct {
	max  int
	wait time.Duration // < 0: no wait
	// run decodes es's payloads and calls the handler with those that decode. It returns one
	// error per job of es (a decode error, or the handler's result for the job) and, when the
	// handler panicked, the panic's value and stack (the errors are then meaningless for the
	// jobs the handler received; passed says which).
	run func(ctx context.Context, es []*Execution) (errs []error, passed []bool, panicked any, stack []byte)
}

// NewBatchHandler returns the handler of a batch kind (worker.RegisterBatch): batches of up to
// max jobs, formed for at most wait (< 0: no wait). run decodes the jobs' payloads and calls
// the application's handler with those that decode; it returns one error per job (a decode
// error, or the handler's result for the job) and, when the handler panicked, the panic's
// value and stack (the errors are then meaningless for the jobs the handler received; passed
// says which).
func NewBatchHandler(kind string, version int, opts KindOptions, max int, wait time.Duration,
	run func(ctx context.Context, es []*Execution) (errs []error, passed []bool, panicked any, stack []byte)) *Handler {
	return &Handler{kind: kind, version: version, opts: opts, batch: &batchSpec{max: max, wait: wait, run: run}}
}

// batchKey is the batch context's value: the call.
type batchKey struct{}

// batchCall is one running batch call: its jobs, the contexts of those the handler asked for
// (JobContext creates a job's context on demand: a handler that never asks costs no context
// per job), and the count of jobs whose own context has not ended (the batch context ends
// when it reaches zero).
type batchCall struct {
	es     []*Execution // the jobs passed to the handler (read-only)
	ctx    context.Context
	all    context.CancelCauseFunc // ends ctx (and every job context made from it)
	left   atomic.Int32            // live jobs, plus one while they are being registered
	last   atomic.Pointer[error]   // the cause of the job whose context ended last
	idOnce sync.Once
	ids    map[int64]int // job id -> index in es (built on JobContext's first call)
	mu     sync.Mutex
	jctxs  []jobCtx // per job of es, made by JobContext (guarded by mu)
}

// jobCtx is a job's context inside a batch call (JobContext), and what ends it.
type jobCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool // the AfterFunc on the job's own context
}

// jobEnded is told by e.cancel that e's own context ended (any goroutine). Each job counts
// once (its first end), whoever saw it first: the canceller or register.
func (c *batchCall) jobEnded(e *Execution) {
	if e.batch.CompareAndSwap(c, nil) {
		cause := context.Cause(e.ctx)
		c.last.Store(&cause)
		if c.left.Add(-1) == 0 {
			c.all(cause)
		}
	}
}

// register makes e a job of the call and reports whether its own context is still live. Its
// end is counted exactly once: by a later e.cancel (jobEnded), or here when it already ended.
func (c *batchCall) register(e *Execution) bool {
	c.left.Add(1)
	e.batch.Store(c)
	if context.Cause(e.ctx) != nil {
		// Ended before (the cancel did not see c) or meanwhile (jobEnded may have counted it).
		c.jobEnded(e)
		return false
	}
	return true
}

// jobContext returns the context of es[k]: a child of the batch context that also ends with
// the job's own context and carries its execution (made on the first call).
func (c *batchCall) jobContext(k int) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jctxs == nil {
		c.jctxs = make([]jobCtx, len(c.es))
	}
	j := &c.jctxs[k]
	if j.ctx == nil {
		e := c.es[k]
		ctx, cancel := context.WithCancelCause(c.ctx)
		j.stop = context.AfterFunc(e.ctx, func() { cancel(context.Cause(e.ctx)) })
		if c := context.Cause(e.ctx); c != nil {
			cancel(c) // ended already: at once, not when the AfterFunc's goroutine runs
		}
		j.ctx, j.cancel = context.WithValue(ctx, execKey{}, e), cancel
	}
	return j.ctx
}

// causeCtx is the context whose cause decides es[k]'s outcome: its job context when the
// handler asked for it, else the job's own context once it ended, else the batch context.
func (c *batchCall) causeCtx(k int) context.Context {
	c.mu.Lock()
	var j context.Context
	if c.jctxs != nil {
		j = c.jctxs[k].ctx
	}
	c.mu.Unlock()
	switch {
	case j != nil:
		return j
	case context.Cause(c.es[k].ctx) != nil:
		return c.es[k].ctx
	}
	return c.ctx
}

// release ends the job contexts JobContext made (the call returned).
func (c *batchCall) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range c.jctxs {
		if j.ctx != nil {
			j.stop()
			j.cancel(nil)
		}
	}
}

// JobContext is worker.JobContext: the context of job's attempt inside a batch handler's
// call, given the batch's context ctx; ctx itself when job is not one of ctx's batch.
func JobContext(ctx context.Context, job *generics.JobRow) context.Context {
	if job == nil {
		return ctx
	}
	c, ok := ctx.Value(batchKey{}).(*batchCall)
	if !ok {
		return ctx
	}
	c.idOnce.Do(func() {
		c.ids = make(map[int64]int, len(c.es))
		for k, e := range c.es {
			c.ids[e.c.ID] = k
		}
	})
	if k, ok := c.ids[job.ID]; ok {
		return c.jobContext(k)
	}
	return ctx
}

// forming is a batch the queue loop is collecting (loop only).
type forming struct {
	es  []*Execution
	due time.Time // when MaxWait after its first job ends
}

// collect adds e, a claimed job of a batch kind that holds a slot, to its kind's forming
// batch, and starts the batch when it is full (loop).
func (q *queue) collect(e *Execution) {
	spec := e.h.batch
	b := q.forming[e.c.Kind]
	if b == nil {
		if q.forming == nil {
			q.forming = map[string]*forming{}
		}
		b = &forming{due: time.Now().Add(max(spec.wait, 0))}
		q.forming[e.c.Kind] = b
	}
	b.es = append(b.es, e)
	if len(b.es) >= spec.max {
		q.startBatch(e.c.Kind, b)
	}
}

// startBatches starts the forming batches that are due at now, or all of them when the queue
// holds every slot it may (no claim can add to them), and returns when the next one falls due
// (loop; false: none forms).
func (q *queue) startBatches(now time.Time) (time.Time, bool) {
	if len(q.forming) == 0 {
		return time.Time{}, false
	}
	c := q.cfg.Concurrency
	held := q.running >= c || len(q.active) >= 4*c
	var next time.Time
	for kind, b := range q.forming {
		if held || !now.Before(b.due) {
			q.startBatch(kind, b)
			continue
		}
		if next.IsZero() || b.due.Before(next) {
			next = b.due
		}
	}
	return next, !next.IsZero()
}

// startBatch starts the goroutine of kind's forming batch b (loop).
func (q *queue) startBatch(kind string, b *forming) {
	delete(q.forming, kind)
	now := time.Now()
	for _, e := range b.es {
		e.start = now // the stuck deadline counts from the batch's start, as its timeout does
	}
	q.w.m.HandlersRunning.Add(int64(len(b.es)))
	q.w.m.Batches.Add(1)
	q.w.m.BatchJobs.Add(int64(len(b.es)))
	select {
	case q.batchRunCh <- b.es: // an idle batch goroutine
	default:
		go q.batchRunner(b.es)
	}
}

// batchRunner is a batch goroutine: it runs es, then each batch the loop hands it, until the
// loop returns. Reused as handler goroutines are (execute.go, dispatch): a new goroutine per
// batch grew its stack again for every call (decoding the payloads).
func (q *queue) batchRunner(es []*Execution) {
	for es != nil {
		q.runBatch(es)
		es = awaitNext(q, q.batchRunCh)
	}
}

// releaseForming gives back the jobs of the forming batches when Stop begins: claimed, never
// started, released at once without charging the attempt (loop).
func (q *queue) releaseForming() {
	for kind, b := range q.forming {
		for _, e := range b.es {
			e.returned, e.released = true, true
			e.cancel(ErrWorkerStopping)
			if !e.stuck {
				q.running--
			}
			e.fin = finish{to: toRelease}
			q.pending = append(q.pending, e)
		}
		delete(q.forming, kind)
	}
}

// runBatch is a batch's goroutine: it runs the batch and reports its jobs' finishes to the
// queue loop, all in one message (a single handler's goroutine sends one per job). It touches
// no engine state.
func (q *queue) runBatch(es []*Execution) {
	fins := q.w.runBatch(es)
	for _, e := range es {
		e.cancel(nil)
	}
	q.w.m.HandlersRunning.Add(-int64(len(es)))
	select {
	case q.returnedCh <- handlerResult{es: es, fins: fins}:
	case <-q.done:
	}
}

// runBatch runs one batch call and decides each job's next state.
func (w *Engine) runBatch(es []*Execution) []finish {
	h := es[0].h
	fins := make([]finish, len(es))
	all, cancelAll := context.WithCancelCause(w.base)
	defer cancelAll(nil)
	bctx, cancelTimeout := context.WithTimeoutCause(all, h.opts.Timeout, ErrHandlerTimeout)
	defer cancelTimeout()
	call := &batchCall{all: cancelAll, es: make([]*Execution, 0, len(es))}
	call.ctx = context.WithValue(bctx, batchKey{}, call)
	bctx = call.ctx

	// The batch context ends once every job's own context has: left counts the live jobs, plus
	// one while they are being registered. A job's own context ends only through e.cancel,
	// which tells the call (jobEnded); w.base has no cancellation.
	call.left.Store(1)
	var liveIdx []int // es index of each job of call.es, when some job is not passed
	for i, e := range es {
		if !call.register(e) {
			// Its context ended while the batch formed (an operator cancelled it, its lease
			// was lost): not passed to the handler; it ends as a handler returning the cause.
			fins[i] = w.outcome(e.ctx, e, context.Cause(e.ctx))
			if liveIdx == nil {
				liveIdx = make([]int, 0, len(es))
				for k := range i {
					liveIdx = append(liveIdx, k)
				}
			}
			continue
		}
		call.es = append(call.es, e)
		if liveIdx != nil {
			liveIdx = append(liveIdx, i)
		}
	}
	defer func() {
		for _, e := range call.es {
			e.batch.CompareAndSwap(call, nil) // the call is over: no more counting
		}
		call.release()
	}()
	live := call.es
	if len(live) == 0 {
		return fins
	}
	if call.left.Add(-1) == 0 {
		cancelAll(*call.last.Load())
	}
	errs, passed, panicked, stack := w.callBatch(bctx, h.batch, live)
	if panicked != nil {
		w.m.Panics.Add(1)
		w.log.Error("tenure: batch handler panicked; every job of the batch fails", logkey.Kind, h.kind, logkey.Jobs, len(live),
			"panic", panicked, "stack", string(stack))
	}
	for k, e := range live {
		i := k
		if liveIdx != nil {
			i = liveIdx[k]
		}
		if panicked != nil && passed[k] {
			fins[i] = w.failure(e, CodePanic, 0, fmt.Errorf("panic: %v", panicked))
			continue
		}
		if errs[k] == nil {
			fins[i] = finish{to: toSucceeded} // outcome's first case, whatever the context
			continue
		}
		fins[i] = w.outcome(call.causeCtx(k), e, errs[k])
	}
	return fins
}

// callBatch runs spec's call for es. A panic outside the handler and the decoding (a bug of
// the call's own code) fails every job as a panic in the handler does, rather than the process.
func (w *Engine) callBatch(ctx context.Context, spec *batchSpec, es []*Execution) (errs []error, passed []bool, panicked any, stack []byte) {
	defer func() {
		if r := recover(); r != nil {
			errs, passed, panicked, stack = make([]error, len(es)), make([]bool, len(es)), r, debug.Stack()
			for i := range passed {
				passed[i] = true
			}
		}
	}()
	return spec.run(ctx, es)
}
