package worker

import (
	"context"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// HandlerFunc runs one attempt of a job: the registered handler (payload decoding and
// validation included) behind the middleware that follow the one it is passed to. job is the
// attempt's row, the one the handler's generics.Job embeds: it identifies the attempt and
// carries the job's metadata and encoded args; it must not be modified.
type HandlerFunc func(ctx context.Context, job *generics.JobRow) error

// Middleware wraps the handling of every attempt (Config.Middleware). It returns a
// HandlerFunc that calls next with ctx or a context derived from it (the attempt's context
// carries its cancellation, lease loss and the handle CompleteTx and Effect use), and returns
// next's error unchanged unless it means to change the attempt's outcome: the engine
// classifies the returned error (retry, dead, cancelled) as it does a handler's. A panic in
// next propagates through the middleware (recover, record and re-panic to observe it); the
// engine recovers it as a handler panic.
type Middleware func(next HandlerFunc) HandlerFunc

// wrap returns run inside the kind's middleware (kindMW, inside Config.Middleware; [0]
// outermost of each), as the engine calls a kind's handler: without middleware, run itself.
func (w *Worker) wrap(run func(ctx context.Context, e *engine.Execution) error, kindMW []Middleware) func(ctx context.Context, e *engine.Execution) error {
	global := w.cfg.Middleware
	if len(global) == 0 && len(kindMW) == 0 {
		return run
	}
	return func(ctx context.Context, e *engine.Execution) error {
		next := HandlerFunc(func(ctx context.Context, _ *generics.JobRow) error { return run(ctx, e) })
		for _, chain := range [][]Middleware{kindMW, global} {
			for i := len(chain) - 1; i >= 0; i-- {
				if mw := chain[i]; mw != nil {
					next = mw(next)
				}
			}
		}
		return next(ctx, e.Job())
	}
}
