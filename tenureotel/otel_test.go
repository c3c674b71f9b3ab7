package tenureotel_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureotel"
	"github.com/tenureq/tenure/worker"
)

type okArgs struct {
	N int `json:"n"`
}

func (okArgs) Kind() string        { return "ok" }
func (okArgs) PayloadVersion() int { return 1 }

type failArgs struct{}

func (failArgs) Kind() string        { return "fail" }
func (failArgs) PayloadVersion() int { return 1 }

func newWorker(t testing.TB, pool *pgxpool.Pool, tp trace.TracerProvider, handlerTrace chan<- trace.SpanContext) *worker.Worker {
	t.Helper()
	w, err := worker.New(pool, &worker.Config{
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: 2}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FetchPollMin: 10 * time.Millisecond,
		FetchPollMax: 100 * time.Millisecond,
		Middleware:   []worker.Middleware{tenureotel.Middleware(&tenureotel.Config{TracerProvider: tp})},
	})
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[okArgs]) error {
		if handlerTrace != nil {
			handlerTrace <- trace.SpanContextFromContext(ctx)
		}
		return nil
	}, nil)
	worker.MustRegister(w, func(context.Context, *generics.Job[failArgs]) error {
		return errors.New("card declined")
	}, &worker.HandlerOptions{MaxAttempts: 1})
	return w
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// TestHandlerSpanIsChildOfEnqueuer enqueues jobs inside a span and checks the worker's
// attempt spans: same trace, parent = the enqueuing span (remote), consumer kind, the job's
// attributes; the handler's context holds the attempt span; a failing handler's error is
// recorded with status Error; a job enqueued outside any span gets a root span.
func TestHandlerSpanIsChildOfEnqueuer(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	client, err := jobs.NewClient(pool, &jobs.Config{BeforeInsert: tenureotel.BeforeInsert(nil)})
	require.NoError(t, err)

	ctx, parent := tp.Tracer("test").Start(context.Background(), "checkout")
	okRow, err := client.Insert(ctx, okArgs{N: 1}, nil)
	require.NoError(t, err)
	require.Contains(t, okRow.Job.Metadata, "traceparent")
	require.Contains(t, okRow.Job.Metadata["traceparent"], parent.SpanContext().TraceID().String())
	ids, err := client.InsertMany(ctx, []jobs.InsertManyParams{{Args: failArgs{}, Opts: &jobs.InsertOpts{MaxAttempts: 1}}})
	require.NoError(t, err)
	failID := ids[0]
	parent.End()
	orphan, err := client.Insert(context.Background(), okArgs{N: 2}, nil)
	require.NoError(t, err)
	require.Nil(t, orphan.Job.Metadata)

	handlerTrace := make(chan trace.SpanContext, 2)
	w := newWorker(t, pool, tp, handlerTrace)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st := w.Stats(); st.Succeeded == 2 && st.Dead == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "jobs did not finish: %+v", w.Stats())
	}

	spans := map[int64]sdktrace.ReadOnlySpan{}
	for deadline := time.Now().Add(5 * time.Second); len(spans) < 3; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "spans ended: %d", len(rec.Ended()))
		for _, s := range rec.Ended() {
			if id, ok := attrs(s)[tenureotel.AttrJobID]; ok {
				spans[id.AsInt64()] = s
			}
		}
	}

	pc := parent.SpanContext()
	s := spans[okRow.Job.ID]
	require.Equal(t, "process ok", s.Name())
	require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
	require.Equal(t, pc.TraceID(), s.SpanContext().TraceID())
	require.Equal(t, pc.SpanID(), s.Parent().SpanID())
	require.True(t, s.Parent().IsRemote())
	a := attrs(s)
	require.Equal(t, "ok", a[tenureotel.AttrKind].AsString())
	require.Equal(t, "default", a[tenureotel.AttrQueue].AsString())
	require.EqualValues(t, 1, a[tenureotel.AttrAttempt].AsInt64())
	require.EqualValues(t, 1, a[tenureotel.AttrGeneration].AsInt64())
	require.Equal(t, "tenure", a["messaging.system"].AsString())
	require.Equal(t, codes.Unset, s.Status().Code)
	require.Empty(t, s.Events())

	// The handler ran inside its attempt span.
	got := map[trace.SpanID]bool{}
	for range 2 {
		sc := <-handlerTrace
		got[sc.SpanID()] = true
	}
	require.True(t, got[s.SpanContext().SpanID()], "handler context does not hold the attempt span")

	f := spans[failID.Job.ID]
	require.Equal(t, "process fail", f.Name())
	require.Equal(t, pc.TraceID(), f.SpanContext().TraceID())
	require.Equal(t, pc.SpanID(), f.Parent().SpanID())
	require.Equal(t, codes.Error, f.Status().Code)
	require.Equal(t, "card declined", f.Status().Description)
	require.Len(t, f.Events(), 1)
	require.Equal(t, "exception", f.Events()[0].Name)
	var msg string
	for _, kv := range f.Events()[0].Attributes {
		if kv.Key == "exception.message" {
			msg = kv.Value.AsString()
		}
	}
	require.Equal(t, "card declined", msg)

	o := spans[orphan.Job.ID]
	require.False(t, o.Parent().IsValid(), "a job enqueued outside any span gets a root span")
	require.NotEqual(t, pc.TraceID(), o.SpanContext().TraceID())
}

// TestMiddlewareOptions calls the middleware directly: Link starts a new trace linked to the
// enqueuer's span, keys the caller set are not overwritten by Inject, a *worker.JobError's
// code is recorded, and a panic is recorded and re-raised.
func TestMiddlewareOptions(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "enqueue")
	opts := &jobs.InsertOpts{Metadata: map[string]string{"tracestate": "mine=1"}}
	tenureotel.Inject(ctx, nil, opts)
	parent.End()
	require.Equal(t, "mine=1", opts.Metadata["tracestate"])
	require.Contains(t, opts.Metadata["traceparent"], parent.SpanContext().SpanID().String())
	job := &generics.JobRow{ID: 7, Kind: "k", Queue: "q", Attempt: 3, Generation: 4, Metadata: opts.Metadata}

	linked := tenureotel.Middleware(&tenureotel.Config{TracerProvider: tp, Link: true})(func(context.Context, *generics.JobRow) error {
		return worker.Permanent(errors.New("no"))
	})
	require.Error(t, linked(context.Background(), job))
	panicky := tenureotel.Middleware(&tenureotel.Config{TracerProvider: tp})(func(context.Context, *generics.JobRow) error {
		panic("boom")
	})
	require.PanicsWithValue(t, "boom", func() { _ = panicky(context.Background(), job) })

	ended := rec.Ended()
	require.Len(t, ended, 3) // enqueue, linked, panicky
	l := ended[1]
	require.False(t, l.Parent().IsValid())
	require.NotEqual(t, parent.SpanContext().TraceID(), l.SpanContext().TraceID())
	require.Len(t, l.Links(), 1)
	require.Equal(t, parent.SpanContext().SpanID(), l.Links()[0].SpanContext.SpanID())
	require.Equal(t, string(worker.CodePermanent), attrs(l)[tenureotel.AttrErrorCode].AsString())
	p := ended[2]
	require.Equal(t, parent.SpanContext().SpanID(), p.Parent().SpanID())
	require.Equal(t, codes.Error, p.Status().Code)
	require.Equal(t, "panic: boom", p.Events()[0].Attributes[1].Value.AsString())
}

const (
	envChild   = "TENURE_OTEL_CHILD"
	envChildDB = "TENURE_OTEL_DB"
)

// childMain runs a worker with an in-memory span recorder on envChildDB until it handled one
// ok job, then prints "span <trace id> <span id> <parent span id> <parent remote>".
func childMain() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(envChildDB))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	defer pool.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	w := newWorker(&childT{}, pool, tp, nil)
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range rec.Ended() {
			if s.Name() == "process ok" {
				fmt.Printf("span %s %s %s %v\n", s.SpanContext().TraceID(), s.SpanContext().SpanID(), s.Parent().SpanID(), s.Parent().IsRemote())
				return 0
			}
		}
	}
	fmt.Fprintln(os.Stderr, "child: no span within 20s")
	return 1
}

// childT lets newWorker run outside a test: a failed require ends the child.
type childT struct{ testing.TB }

func (childT) Helper() {}
func (childT) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "child: "+format+"\n", args...)
}
func (childT) FailNow() { os.Exit(2) }

// TestTraceCrossesProcesses enqueues a job inside a span in this process and has another
// process (this test binary re-executed) run it: the child's attempt span reports the same
// trace id and the enqueuing span as its remote parent.
func TestTraceCrossesProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process (-short)")
	}
	t.Parallel()
	pool := pgtest.NewPool(t)
	tp := sdktrace.NewTracerProvider()
	client, err := jobs.NewClient(pool, &jobs.Config{BeforeInsert: tenureotel.BeforeInsert(nil)})
	require.NoError(t, err)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "enqueue")
	_, err = client.Insert(ctx, okArgs{N: 1}, nil)
	require.NoError(t, err)
	parent.End()

	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envChild+"=1", envChildDB+"="+pool.Config().ConnString())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "span ") {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	var line string
	select {
	case l, ok := <-lines:
		require.True(t, ok, "child printed no span; stderr:\n%s", stderr.String())
		line = l
	case <-time.After(30 * time.Second):
		t.Fatalf("no span from the child within 30s; stderr:\n%s", stderr.String())
	}
	f := strings.Fields(line)
	require.Len(t, f, 5, line)
	t.Logf("parent trace %s span %s; child: %s", parent.SpanContext().TraceID(), parent.SpanContext().SpanID(), line)
	require.Equal(t, parent.SpanContext().TraceID().String(), f[1])
	require.Equal(t, parent.SpanContext().SpanID().String(), f[3])
	require.Equal(t, "true", f[4])
	require.NotEqual(t, parent.SpanContext().SpanID().String(), f[2])
}
