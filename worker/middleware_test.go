package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestMiddlewareWrapsHandlers checks Config.Middleware: order (first outermost), the attempt's
// identity and metadata, a context value reaching the handler, the handler's error seen by the
// middleware and classified as the handler's, and a middleware that refuses an attempt.
func TestMiddlewareWrapsHandlers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	type ctxKey struct{}
	var mu sync.Mutex
	var trace []string
	seen := map[int64]generics.JobRow{}
	handlerMeta := map[int64]map[string]string{}
	var handlerErrs []error
	record := func(s string) { mu.Lock(); trace = append(trace, s); mu.Unlock() }

	cfg := fastConfig(nil)
	cfg.Middleware = []worker.Middleware{
		func(next worker.HandlerFunc) worker.HandlerFunc {
			return func(ctx context.Context, job *generics.JobRow) error {
				record("outer")
				mu.Lock()
				seen[job.ID] = *job
				mu.Unlock()
				if job.Metadata["refuse"] == "yes" {
					return worker.Permanent(errors.New("refused by middleware"))
				}
				err := next(context.WithValue(ctx, ctxKey{}, "from-outer"), job)
				mu.Lock()
				handlerErrs = append(handlerErrs, err)
				mu.Unlock()
				return err
			}
		},
		nil, // skipped
		func(next worker.HandlerFunc) worker.HandlerFunc {
			return func(ctx context.Context, job *generics.JobRow) error {
				record("inner")
				return next(ctx, job)
			}
		},
	}
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[failArgs]) error {
		record("handler:" + ctx.Value(ctxKey{}).(string))
		mu.Lock()
		handlerMeta[j.ID] = j.Metadata
		mu.Unlock()
		if j.Args.Msg != "" {
			return errors.New(j.Args.Msg)
		}
		return nil
	}, &worker.HandlerOptions{MaxAttempts: 1})
	c := newClient(t, pool, w)
	ctx := context.Background()
	ok, err := c.Insert(ctx, failArgs{}, &jobs.InsertOpts{Metadata: map[string]string{"traceparent": "tp-1"}})
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "ok job", func() bool { return w.Stats().Succeeded == 1 })
	mu.Lock()
	require.Equal(t, []string{"outer", "inner", "handler:from-outer"}, trace)
	require.Equal(t, map[string]string{"traceparent": "tp-1"}, handlerMeta[ok.Job.ID])
	m := seen[ok.Job.ID]
	// Middleware sees the whole attempt, as the handler's Job carries it.
	require.Equal(t, generics.JobRow{ID: ok.Job.ID, Kind: "fail", Queue: "default", Priority: jobs.PriorityNormal,
		State: generics.JobStateRunning, Payload: ok.Job.Payload, PayloadVersion: ok.Job.PayloadVersion,
		Attempt: 1, MaxAttempts: m.MaxAttempts, Generation: 1, ClaimToken: m.ClaimToken, RunAt: ok.Job.RunAt,
		CreatedAt: ok.Job.CreatedAt, UpdatedAt: m.UpdatedAt, AttemptedAt: m.AttemptedAt, LockedBy: w.ID(),
		LockedUntil: m.LockedUntil, Lease: m.Lease, Metadata: map[string]string{"traceparent": "tp-1"}}, m)
	require.NotNil(t, m.ClaimToken)
	require.Positive(t, m.MaxAttempts)
	require.NotNil(t, m.AttemptedAt)
	require.Equal(t, *m.AttemptedAt, m.UpdatedAt)
	require.Equal(t, m.AttemptedAt.Add(m.Lease), *m.LockedUntil)
	trace = nil
	mu.Unlock()

	failing, err := c.Insert(ctx, failArgs{Msg: "boom"}, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "failing job", func() bool { return w.Stats().Dead == 1 })
	refused, err := c.Insert(ctx, failArgs{}, &jobs.InsertOpts{Metadata: map[string]string{"refuse": "yes"}})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "refused job", func() bool { return w.Stats().Dead == 2 })

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"outer", "inner", "handler:from-outer", "outer"}, trace)
	require.Len(t, handlerErrs, 2)
	require.NoError(t, handlerErrs[0])
	require.EqualError(t, handlerErrs[1], "boom")
	require.Nil(t, handlerMeta[failing.Job.ID])
	for id, code := range map[int64]string{failing.Job.ID: "HANDLER_ERROR", refused.Job.ID: "PERMANENT"} {
		r, err := c.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, generics.JobStateDead, r.State)
		require.Equal(t, code, r.LastErrorCode)
	}
}

// TestPerKindMiddleware: HandlerOptions.Middleware wraps only its kind, inside
// Config.Middleware (global outermost, then the kind's in order, then the handler).
func TestPerKindMiddleware(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var mu sync.Mutex
	trace := map[string][]string{}
	mw := func(name string) worker.Middleware {
		return func(next worker.HandlerFunc) worker.HandlerFunc {
			return func(ctx context.Context, job *generics.JobRow) error {
				mu.Lock()
				trace[job.Kind] = append(trace[job.Kind], name)
				mu.Unlock()
				return next(ctx, job)
			}
		}
	}
	cfg := fastConfig(nil)
	cfg.Middleware = []worker.Middleware{mw("global-1"), mw("global-2")}
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[failArgs]) error {
		mu.Lock()
		trace["fail"] = append(trace["fail"], "handler")
		mu.Unlock()
		return nil
	}, &worker.HandlerOptions{Middleware: []worker.Middleware{mw("kind-1"), nil, mw("kind-2")}})
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[noopArgs]) error {
		mu.Lock()
		trace["noop"] = append(trace["noop"], "handler")
		mu.Unlock()
		return nil
	}, nil)
	c := newClient(t, pool, w)
	ctx := context.Background()
	_, err = c.Insert(ctx, failArgs{}, nil)
	require.NoError(t, err)
	_, err = c.Insert(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "both jobs", func() bool { return w.Stats().Succeeded == 2 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"global-1", "global-2", "kind-1", "kind-2", "handler"}, trace["fail"])
	require.Equal(t, []string{"global-1", "global-2", "handler"}, trace["noop"])
}
