// Package tenureotel traces Tenure jobs with OpenTelemetry: the enqueuer's span context
// travels in the job's metadata as a W3C trace context (traceparent, tracestate), and every
// attempt runs in a consumer span that is its child (or, with Config.Link, a new trace linked
// to it), in whichever process runs it.
//
//	client, _ := jobs.NewClient(pool, &jobs.Config{BeforeInsert: tenureotel.BeforeInsert(nil)})
//	w, _ := worker.New(pool, &worker.Config{Middleware: []worker.Middleware{tenureotel.Middleware(nil)}})
//
// The core packages (jobs, worker, generics) never import OpenTelemetry; this package plugs
// into their seams (jobs.Config.BeforeInsert, worker.Config.Middleware).
package tenureotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/tenureq/tenure/tenureotel"

// Attribute keys of attempt spans (besides messaging.system = "tenure" and
// messaging.destination.name = the queue).
const (
	AttrJobID      = attribute.Key("tenure.job.id")
	AttrKind       = attribute.Key("tenure.job.kind")
	AttrQueue      = attribute.Key("tenure.job.queue")
	AttrAttempt    = attribute.Key("tenure.job.attempt")
	AttrGeneration = attribute.Key("tenure.job.generation")
	AttrErrorCode  = attribute.Key("tenure.job.error_code")
)

// Config configures BeforeInsert and Middleware. A nil *Config, or zero fields, mean the
// defaults.
type Config struct {
	// TracerProvider starts the attempt spans. Default otel.GetTracerProvider() (read when
	// Middleware is called).
	TracerProvider trace.TracerProvider
	// Propagator writes the span context into job metadata and reads it back. Default
	// propagation.TraceContext{} (W3C traceparent and tracestate). Use the same on both sides.
	Propagator propagation.TextMapPropagator
	// Link starts every attempt span as the root of a new trace, linked to the enqueuer's
	// span, instead of its child: for jobs that run long after they were enqueued (retries,
	// schedules), where one trace spanning hours is unwelcome.
	Link bool
}

func (c *Config) propagator() propagation.TextMapPropagator {
	if c != nil && c.Propagator != nil {
		return c.Propagator
	}
	return propagation.TraceContext{}
}

// BeforeInsert returns a jobs.Config.BeforeInsert hook that writes the span context of the
// insert's ctx into the job's metadata. Keys the caller set already are kept; a ctx without a
// valid span context adds nothing.
func BeforeInsert(cfg *Config) func(ctx context.Context, kind string, opts *jobs.InsertOpts) {
	prop := cfg.propagator()
	return func(ctx context.Context, _ string, opts *jobs.InsertOpts) {
		Inject(ctx, prop, opts)
	}
}

// Inject writes the span context of ctx into opts.Metadata with prop (nil:
// propagation.TraceContext{}), keeping keys already set. It is what BeforeInsert does, for
// callers that build their options by hand.
func Inject(ctx context.Context, prop propagation.TextMapPropagator, opts *jobs.InsertOpts) {
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	carrier := propagation.MapCarrier{}
	prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return
	}
	if opts.Metadata == nil {
		opts.Metadata = make(map[string]string, len(carrier))
	}
	for k, v := range carrier {
		if _, set := opts.Metadata[k]; !set {
			opts.Metadata[k] = v
		}
	}
}

// Extract returns ctx with the remote span context found in a job's metadata, if any.
func Extract(ctx context.Context, prop propagation.TextMapPropagator, metadata map[string]string) context.Context {
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return prop.Extract(ctx, propagation.MapCarrier(metadata))
}

// Middleware returns a worker.Middleware that runs every attempt in a consumer span named
// "process <kind>", the child of the span context found in the job's metadata (or linked to
// it, Config.Link; a new root when the job carries none), with the job's id, kind, queue, attempt and generation as attributes.
// A returned error is recorded on the span (status Error, with its code when it is a
// *worker.JobError); a panic is recorded and re-raised.
func Middleware(cfg *Config) worker.Middleware {
	tp := otel.GetTracerProvider()
	if cfg != nil && cfg.TracerProvider != nil {
		tp = cfg.TracerProvider
	}
	tracer := tp.Tracer(ScopeName)
	prop := cfg.propagator()
	link := cfg != nil && cfg.Link
	return func(next worker.HandlerFunc) worker.HandlerFunc {
		return func(ctx context.Context, job *generics.JobRow) (err error) {
			attrs := []attribute.KeyValue{
				attribute.String("messaging.system", "tenure"),
				attribute.String("messaging.destination.name", job.Queue),
				AttrJobID.Int64(job.ID), AttrKind.String(job.Kind), AttrQueue.String(job.Queue),
				AttrAttempt.Int(job.Attempt), AttrGeneration.Int64(job.Generation),
			}
			opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
			// The job's own context only: a span in the worker's Start context must not
			// become the parent of every job's span.
			remote := trace.SpanContextFromContext(Extract(context.Background(), prop, job.Metadata))
			switch {
			case !remote.IsValid():
				opts = append(opts, trace.WithNewRoot())
			case link:
				opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: remote}))
			}
			// Extracting into ctx keeps whatever else the propagator carries (baggage).
			ctx, span := tracer.Start(Extract(ctx, prop, job.Metadata), "process "+job.Kind, opts...)
			defer func() {
				if r := recover(); r != nil {
					span.RecordError(fmt.Errorf("panic: %v", r))
					span.SetStatus(codes.Error, "panic")
					span.End()
					panic(r)
				}
				if err != nil {
					var je *worker.JobError
					if errors.As(err, &je) {
						span.SetAttributes(AttrErrorCode.String(string(je.Code)))
					}
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				}
				span.End()
			}()
			return next(ctx, job)
		}
	}
}
