package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker/internal/engine"
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

// DefaultBatchMaxSize is BatchOptions.MaxSize's default.
const DefaultBatchMaxSize = 100

// MaxBatchSize is the largest BatchOptions.MaxSize.
const MaxBatchSize = 1000

// DefaultBatchMaxWait is BatchOptions.MaxWait's default.
const DefaultBatchMaxWait = time.Second

// ErrBatchResultLength is the error of every job of a batch whose handler returned a result
// slice that is neither nil nor as long as the batch: the results cannot be matched to the
// jobs, so every job's attempt fails (code HANDLER_ERROR, retried under the kind's policy).
var ErrBatchResultLength = errors.New("tenure: batch handler returned a result slice of the wrong length")

// BatchOptions configure a batch kind (RegisterBatch).
type BatchOptions struct {
	// HandlerOptions are the kind's options, as for Register: queue, priority, max attempts,
	// lease, retry policy, upgraders, max snoozes, and the args type's declared defaults fill
	// and check them the same way. Timeout bounds one batch call: the batch's context ends
	// with cause ErrHandlerTimeout that long after the batch starts, and each job still
	// running fails with TIMEOUT. Middleware must be empty (ErrInvalidConfig): a middleware
	// wraps one attempt, and a batch call runs many; Config.Middleware does not wrap batch
	// calls either.
	HandlerOptions
	// MaxSize is the most jobs one call receives. Default DefaultBatchMaxSize (100); at most
	// MaxBatchSize. Each job of a batch holds one handler slot of its queue from its claim to
	// its finish, so a batch never holds more than the queue's Concurrency: set Concurrency
	// to at least MaxSize (a claim takes at most Config.MaxClaimBatch jobs, 100 by default;
	// larger batches are collected over several claims).
	MaxSize int
	// MaxWait is how long a batch waits for more jobs after its first job was claimed before
	// it is handled with what it has. Default DefaultBatchMaxWait (1s); negative: no wait (a
	// batch is what one turn of the queue's claims returned). At most Timeout. A batch also
	// starts at once, whatever MaxWait, when it is full or the queue has no free slot left to
	// claim more.
	MaxWait time.Duration
}

// RegisterBatch adds the batch handler of args type A: fn receives up to opts.MaxSize jobs
// of the kind, claimed by this worker, at once. It must be called before Start; the kind is
// registered as Register registers one (registry, declared defaults, enqueue defaults,
// payload version checks), and a kind is either a batch kind or a single one.
//
// fn returns one result per job: results[i] is the outcome of batch[i]'s attempt, nil for
// success, an error handled exactly as a single handler's error (retried with the kind's
// retry policy, dead after MaxAttempts, Permanent, Snooze, RetryAfter, WithCode...). A nil
// results slice with a nil error means every job succeeded. A non-nil error fails every job
// of the batch with that error (a batch-level failure); a panic fails each with PANIC; a
// results slice of another length fails each with ErrBatchResultLength. Each job's finish is
// its own fenced write: a job whose lease was lost meanwhile is refused by the fence without
// affecting the others.
//
// ctx is the batch's context (the kind's timeout); JobContext(ctx, job.JobRow) is a job's own,
// which SetOutput, Progress, Effect, CompleteTx and DependencyOutput need and which also ends
// when that job's lease is lost or an operator cancels it. A job whose payload does not decode
// is not passed to fn (it fails INVALID_PAYLOAD, or is deferred when its version is newer than
// A's); fn is not called when no job is left.
func RegisterBatch[A generics.Args](w *Worker, fn func(ctx context.Context, batch []*generics.Job[A]) ([]error, error), opts *BatchOptions) error {
	if fn == nil {
		return fmt.Errorf("%w: nil batch handler", ErrInvalidConfig)
	}
	var o BatchOptions
	if opts != nil {
		o = *opts
	}
	var zero A
	kind := zero.Kind()
	if len(o.Middleware) > 0 {
		return fmt.Errorf("%w: batch kind %q: HandlerOptions.Middleware wraps one attempt and cannot wrap a batch call", ErrInvalidConfig, kind)
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultBatchMaxSize
	}
	if o.MaxSize < 1 || o.MaxSize > MaxBatchSize {
		return fmt.Errorf("%w: batch kind %q: MaxSize %d outside 1..%d", ErrInvalidConfig, kind, o.MaxSize, MaxBatchSize)
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultBatchMaxWait
	}
	return register[A](w, &o.HandlerOptions, func(kind string, version int, ho HandlerOptions) (*engine.Handler, error) {
		if o.MaxWait > ho.Timeout {
			return nil, fmt.Errorf("%w: batch kind %q: MaxWait %v above the kind's Timeout %v", ErrInvalidConfig, kind, o.MaxWait, ho.Timeout)
		}
		return engine.NewBatchHandler(kind, version, ho.kindOptions(), o.MaxSize, o.MaxWait, func(ctx context.Context, es []*engine.Execution) ([]error, []bool, any, []byte) {
			errs, passed := make([]error, len(es)), make([]bool, len(es))
			// One allocation for the jobs (the handler gets pointers into it), and idx only
			// when a job is not passed (else batch[k] is es[k]).
			jobs := make([]generics.Job[A], len(es))
			batch := make([]*generics.Job[A], 0, len(es))
			var idx []int
			for i, e := range es {
				args, err := decodeRecovered[A](w, e)
				if err != nil {
					errs[i] = err // INVALID_PAYLOAD, or PANIC from an upgrader
					if idx == nil {
						idx = make([]int, i, len(es))
						for k := range i {
							idx[k] = k
						}
					}
					continue
				}
				jobs[i] = generics.Job[A]{Args: args, JobRow: e.Job()}
				batch = append(batch, &jobs[i])
				if idx != nil {
					idx = append(idx, i)
				}
				passed[i] = true
			}
			if idx == nil {
				idx = identityIdx[:len(es):len(es)]
			}
			if len(batch) == 0 {
				return errs, passed, nil, nil
			}
			var (
				res      []error
				err      error
				panicked any
				stack    []byte
			)
			func() {
				defer func() {
					if r := recover(); r != nil {
						panicked, stack = r, debug.Stack()
					}
				}()
				res, err = fn(ctx, batch)
			}()
			switch {
			case panicked != nil:
			case err != nil:
				for _, i := range idx {
					errs[i] = err
				}
			case res == nil:
			case len(res) != len(batch):
				lerr := fmt.Errorf("%w: %d results for %d jobs", ErrBatchResultLength, len(res), len(batch))
				for _, i := range idx {
					errs[i] = lerr
				}
			default:
				for k, i := range idx {
					errs[i] = res[k]
				}
			}
			return errs, passed, panicked, stack
		}), nil
	})
}

// identityIdx is [0, 1, ..., MaxBatchSize-1], shared and read-only: the index map of a batch
// whose jobs all decoded (a batch holds at most MaxSize jobs).
var identityIdx = func() []int {
	s := make([]int, MaxBatchSize)
	for i := range s {
		s[i] = i
	}
	return s
}()

// decodeRecovered decodes e's payload as A: an error is the job's INVALID_PAYLOAD (or its
// deferral, for a newer version: outcome), and a panic while decoding (an upgrader's) is the
// job's PANIC failure, not the batch's.
func decodeRecovered[A generics.Args](w *Worker, e *engine.Execution) (args A, err error) {
	defer func() {
		if r := recover(); r != nil {
			e.LogPanic("tenure: payload upgrade panicked", r, debug.Stack())
			err = WithCode(CodePanic, fmt.Errorf("panic: %v", r))
		}
	}()
	job := e.Job()
	if args, err = generics.Decode[A](w.reg, job.Payload, job.PayloadVersion); err != nil {
		err = WithCode(CodeInvalidPayload, err)
	}
	return args, err
}

// MustRegisterBatch is RegisterBatch that panics on error.
func MustRegisterBatch[A generics.Args](w *Worker, fn func(ctx context.Context, batch []*generics.Job[A]) ([]error, error), opts *BatchOptions) {
	if err := RegisterBatch(w, fn, opts); err != nil {
		panic(err)
	}
}

// JobContext returns the context of job's attempt inside a batch handler's call, given the
// batch's context ctx: a child of ctx that also ends when that job's own context does (its
// lease lost: cause ErrLeaseLost; an operator cancelled it: ErrJobCancelled), and that
// SetOutput, Progress, Effect, CompleteTx and DependencyOutput take to act on that job. When
// job is not one of ctx's batch (or ctx is a single handler's context), it returns ctx
// unchanged: in a single handler ctx already is the job's context.
func JobContext(ctx context.Context, job *generics.JobRow) context.Context {
	return engine.JobContext(ctx, job)
}
