package tenurenats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenurenats/internal/natsdb"
	"github.com/tenureq/tenure/worker"
)

// Config configures a Worker. Stream is required; every other field documents its default.
type Config struct {
	// Stream is the JetStream stream holding the jobs. Required.
	Stream string
	// SubjectPrefix must match the Client's: kind K is consumed from "<SubjectPrefix>.<K>".
	// Default "tenure.jobs".
	SubjectPrefix string
	// DeadLetterPrefix: a job that ends dead is published to "<DeadLetterPrefix>.<kind>" with
	// its payload, headers and the error (HeaderErrorCode, HeaderError, HeaderAttempts,
	// HeaderSource, HeaderSourceSeq), then terminated. A stream must capture these subjects
	// (while none does, the dead letter cannot be published and the job is retried later,
	// never lost). Default "<SubjectPrefix>_dead".
	DeadLetterPrefix string
	// Durable prefixes the durable consumer names: kind K is consumed by "<Durable>_<K>", one
	// consumer per kind (its AckWait is the kind's lease). Workers with the same Durable share
	// the work. Default "tenure".
	Durable string
	// Concurrency is the number of handler slots, shared by all kinds. A fetch never asks for
	// more messages than free slots, so a worker does not hold messages it cannot run yet.
	// Default 10.
	Concurrency int
	// FetchWait is how long one fetch waits for messages; it also bounds how late Run notices
	// that its context ended. Default 1 s.
	FetchWait time.Duration
	// StopTimeout is how long Run waits, after its context ended, for running handlers before
	// it cancels their contexts (cause worker.ErrWorkerStopping); their messages are then
	// Nak'ed for redelivery. Default 10 s.
	StopTimeout time.Duration
	// Pool, when set, is the database of the effect ledger (tenure.stream_effects): worker.Effect
	// called from a handler run here records and replays there. Without it worker.Effect
	// returns worker.ErrNotInHandler.
	Pool *pgxpool.Pool
	// Schema is the PostgreSQL schema of the effect ledger in Pool (S.stream_effects): the
	// one Tenure was migrated into (migrations.Options.Schema; docs/guide.md, "A schema of
	// your own"). Default "tenure". An invalid name is refused by NewWorker with
	// ErrInvalidConfig and a *migrations.InvalidSchemaError (migrations.ErrInvalidSchema).
	Schema string
	// EffectKeyPrefix is put in front of every effect key (worker.Config.EffectKeyPrefix's
	// counterpart). Keys are "<EffectKeyPrefix>nats:<Stream>:job:<sequence>:effect:<name>".
	EffectKeyPrefix string
	// EffectRetention is how long ledger rows are kept; the worker deletes older ones every
	// 10 minutes. Negative disables. Default 7 days. It must exceed a job's whole retry horizon.
	EffectRetention time.Duration
	// Logger receives errors and warnings. Default slog.Default().
	Logger *slog.Logger
	// OnOutcome, when set, is called after each attempt's outcome was handed to JetStream.
	OnOutcome func(Outcome)
}

// Outcome is what happened to one attempt.
type Outcome struct {
	Kind       string
	Seq        uint64 // the job's stream sequence (generics.Job.ID)
	Attempt    int
	Transition string // worker.OutcomeSucceeded, OutcomeRetried, OutcomeDead or OutcomeReleased
	Code       worker.ErrorCode
	Delay      time.Duration // retry: the NakWithDelay delay
	Err        error         // the handler's error, or the error acknowledging the outcome
}

// Stats are a worker's counters since it was created.
type Stats struct {
	Fetched, Succeeded, Retried, Dead, Released, AckErrors int64
}

type handler struct {
	kind    string
	version int
	opts    worker.HandlerOptions
	run     func(ctx context.Context, j jobAttempt) error
}

// jobAttempt is one delivery, before decoding.
type jobAttempt struct {
	payload  []byte
	version  int
	meta     generics.JobRow
	maxAtt   int
	created  time.Time
	claimed  time.Time
	lease    time.Duration
	metadata map[string]string
}

// Worker runs typed job handlers on jobs consumed from a JetStream stream: the same
// generics.Job[A], payload versions and validation, handler signature, error codes, full-jitter
// retries and effect ledger as worker.Worker, with JetStream's delivery instead of the jobs
// table (docs/guide.md, "Past one database: JetStream", says what differs).
type Worker struct {
	js      jetstream.JetStream
	cfg     Config
	sch     *dbschema.Schema // Config.Schema: every ledger statement runs through sch.Wrap
	reg     *generics.Registry
	mu      sync.Mutex
	h       map[string]*handler
	running atomic.Bool

	fetched, succeeded, retried, dead, released, ackErrors atomic.Int64
}

// NewWorker returns a worker consuming from cfg.Stream through js.
func NewWorker(js jetstream.JetStream, cfg *Config) (*Worker, error) {
	if js == nil || cfg == nil {
		return nil, fmt.Errorf("%w: nil JetStream or config", ErrInvalidConfig)
	}
	c := *cfg
	if c.Stream == "" {
		return nil, fmt.Errorf("%w: Stream is required", ErrInvalidConfig)
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.DeadLetterPrefix == "" {
		c.DeadLetterPrefix = c.SubjectPrefix + "_dead"
	}
	if c.Durable == "" {
		c.Durable = "tenure"
	}
	for name, s := range map[string]string{"SubjectPrefix": c.SubjectPrefix, "DeadLetterPrefix": c.DeadLetterPrefix} {
		if err := checkSubject(s); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, name, err)
		}
	}
	if c.DeadLetterPrefix == c.SubjectPrefix {
		return nil, fmt.Errorf("%w: DeadLetterPrefix must differ from SubjectPrefix", ErrInvalidConfig)
	}
	if err := checkKindToken(c.Durable); err != nil {
		return nil, fmt.Errorf("%w: Durable %q", ErrInvalidConfig, c.Durable)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	if c.FetchWait == 0 {
		c.FetchWait = time.Second
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.EffectRetention == 0 {
		c.EffectRetention = 7 * 24 * time.Hour
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return nil, fmt.Errorf("%w: Concurrency %d not in 1..10000", ErrInvalidConfig, c.Concurrency)
	case c.FetchWait < 10*time.Millisecond:
		return nil, fmt.Errorf("%w: FetchWait %v below 10ms", ErrInvalidConfig, c.FetchWait)
	case c.StopTimeout < 0:
		return nil, fmt.Errorf("%w: negative StopTimeout", ErrInvalidConfig)
	}
	sch, err := dbschema.New(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: Schema: %w", ErrInvalidConfig, err)
	}
	c.Schema = sch.Name()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Worker{js: js, cfg: c, sch: sch, reg: generics.NewRegistry(), h: map[string]*handler{}}, nil
}

// Registry returns the worker's kind registry, for a Client (ClientConfig.Registry).
func (w *Worker) Registry() *generics.Registry { return w.reg }

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{Fetched: w.fetched.Load(), Succeeded: w.succeeded.Load(), Retried: w.retried.Load(), Dead: w.dead.Load(),
		Released: w.released.Load(), AckErrors: w.ackErrors.Load()}
}

// Register adds the handler of args type A, with the options worker.Register takes: Timeout
// (default 1 min), Retry (default worker.FullJitter{Base: 1s, Cap: 1h}), Lease (the kind's
// consumer AckWait, default 30 s; the handler's message is kept in progress every Lease/3
// while it runs), MaxAttempts (default 25, when the message does not carry its own) and
// Upgraders. Queue and Priority are recorded in the registry for a jobs.Client and otherwise
// unused. Zero options take the args type's declared defaults (generics.ArgsWithDefaults), as
// in worker.Register. Register before Run.
func Register[A generics.Args](w *Worker, fn func(ctx context.Context, job *generics.Job[A]) error, opts *worker.HandlerOptions) error {
	if fn == nil {
		return fmt.Errorf("%w: nil handler", ErrInvalidConfig)
	}
	var zero A
	kind := zero.Kind()
	if err := checkKindToken(kind); err != nil {
		return err
	}
	// The args type's declared defaults (generics.ArgsWithDefaults) fill what opts leaves.
	o, err := worker.DeclaredOptions[A](opts)
	if err != nil {
		return err
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	if o.Retry == nil {
		o.Retry = worker.FullJitter{Base: time.Second, Cap: time.Hour}
	}
	if o.Lease == 0 {
		o.Lease = jobs.DefaultLease
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = jobs.DefaultMaxAttempts
	}
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("%w: %q: negative Timeout", ErrInvalidConfig, kind)
	case o.Lease < 100*time.Millisecond:
		return fmt.Errorf("%w: %q: Lease %v below 100ms", ErrInvalidConfig, kind, o.Lease)
	case o.MaxAttempts < 1 || o.MaxAttempts > 1000:
		return fmt.Errorf("%w: %q: MaxAttempts %d not in 1..1000", ErrInvalidConfig, kind, o.MaxAttempts)
	}
	if w.running.Load() {
		return fmt.Errorf("%w: register %q before Run", ErrAlreadyRunning, kind)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.h[kind]; dup {
		return fmt.Errorf("%w: %q", generics.ErrDuplicateKind, kind)
	}
	kopts := []generics.KindOption{generics.WithDefaults(generics.KindDefaults{Queue: o.Queue, Priority: o.Priority,
		MaxAttempts: o.MaxAttempts, Lease: o.Lease})}
	if len(o.Upgraders) > 0 {
		kopts = append(kopts, generics.WithUpgrader(o.Upgraders...))
	}
	if _, err := generics.Register[A](w.reg, kopts...); err != nil {
		return err
	}
	w.h[kind] = &handler{kind: kind, version: zero.PayloadVersion(), opts: o, run: func(ctx context.Context, a jobAttempt) error {
		if a.version > zero.PayloadVersion() {
			// The PostgreSQL engine leaves such a job for a newer worker; a stream delivers it
			// anyway. Retry it (a rolling deploy may bring a newer worker) instead of killing
			// it as undecodable; it still ends dead at its attempt budget.
			return worker.WithCode(worker.CodeUnknownKind, &generics.PayloadError{Kind: kind, Version: a.version,
				Reason: generics.ErrUnsupportedVersion, Err: fmt.Errorf("newer than this worker's version %d", zero.PayloadVersion())})
		}
		args, err := generics.Decode[A](w.reg, a.payload, a.version)
		if err != nil {
			return worker.WithCode(worker.CodeInvalidPayload, err)
		}
		meta := a.meta
		meta.Kind, meta.Queue, meta.MaxAttempts = kind, w.cfg.Stream, a.maxAtt
		leaseUntil := a.claimed.Add(a.lease)
		meta.RunAt, meta.CreatedAt, meta.UpdatedAt, meta.AttemptedAt = a.created, a.created, a.claimed, &a.claimed
		meta.LockedUntil, meta.Lease, meta.Metadata = &leaseUntil, a.lease, a.metadata
		meta.State, meta.Payload, meta.PayloadVersion = generics.JobStateRunning, a.payload, a.version
		return fn(ctx, &generics.Job[A]{Args: args, JobRow: &meta})
	}}
	return nil
}

// Run creates or updates the durable consumers of the registered kinds, consumes until ctx
// ends, then waits for running handlers (up to StopTimeout, then cancels them) and returns
// nil. It returns an error at once when the consumers cannot be created.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer w.running.Store(false)
	w.mu.Lock()
	hs := make([]*handler, 0, len(w.h))
	for _, h := range w.h {
		hs = append(hs, h)
	}
	w.mu.Unlock()
	if len(hs) == 0 {
		return fmt.Errorf("%w: no handlers registered", ErrInvalidConfig)
	}
	cons := make([]jetstream.Consumer, len(hs))
	for i, h := range hs {
		c, err := w.js.CreateOrUpdateConsumer(ctx, w.cfg.Stream, jetstream.ConsumerConfig{
			Durable:       w.cfg.Durable + "_" + h.kind,
			FilterSubject: w.cfg.SubjectPrefix + "." + h.kind,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       h.opts.Lease,
			MaxDeliver:    -1, // the attempt budget is the job's (HeaderMaxAttempts), enforced here
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("tenurenats: consumer for %q on stream %q: %w", h.kind, w.cfg.Stream, err)
		}
		cons[i] = c
	}
	slots := make(chan struct{}, w.cfg.Concurrency)
	handlerCtx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	var handlers, loops sync.WaitGroup
	for i, h := range hs {
		loops.Add(1)
		go func() {
			defer loops.Done()
			w.fetchLoop(ctx, handlerCtx, cons[i], h, slots, &handlers)
		}()
	}
	if w.cfg.Pool != nil && w.cfg.EffectRetention > 0 {
		loops.Add(1)
		go func() {
			defer loops.Done()
			w.pruneEffects(ctx)
		}()
	}
	loops.Wait()
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.StopTimeout):
		cancelHandlers(worker.ErrWorkerStopping)
		<-done
	}
	return nil
}

func (w *Worker) fetchLoop(ctx, handlerCtx context.Context, c jetstream.Consumer, h *handler, slots chan struct{}, handlers *sync.WaitGroup) {
	release := func(n int) {
		for range n {
			<-slots
		}
	}
	for {
		select { // one slot, blocking
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	more:
		for n < 100 {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		batch, err := c.Fetch(n, jetstream.FetchMaxWait(w.cfg.FetchWait))
		if err != nil {
			release(n)
			if ctx.Err() != nil {
				return
			}
			w.cfg.Logger.Warn("tenurenats: fetch failed", "kind", h.kind, "err", err)
			sleepCtx(ctx, w.cfg.FetchWait)
			continue
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			w.fetched.Add(1)
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				defer release(1)
				w.execute(handlerCtx, h, msg)
			}()
		}
		release(n - got)
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			w.cfg.Logger.Warn("tenurenats: fetch ended with an error", "kind", h.kind, "err", err)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// execute runs one delivery and hands its outcome to JetStream.
func (w *Worker) execute(ctx context.Context, h *handler, msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		w.cfg.Logger.Error("tenurenats: message without JetStream metadata", "kind", h.kind, "err", err)
		_ = msg.Term()
		return
	}
	hdr := msg.Headers()
	token := uuid.New()
	a := jobAttempt{payload: msg.Data(), created: md.Timestamp, claimed: time.Now(), lease: h.opts.Lease, maxAtt: h.opts.MaxAttempts,
		meta: generics.JobRow{ID: int64(md.Sequence.Stream), Kind: h.kind, Queue: w.cfg.Stream, Attempt: int(md.NumDelivered),
			Generation: int64(md.NumDelivered), ClaimToken: &token}}
	if v, err := strconv.Atoi(hdr.Get(HeaderMaxAttempts)); err == nil && v >= 1 && v <= 1000 {
		a.maxAtt = v
	}
	out := Outcome{Kind: h.kind, Seq: md.Sequence.Stream, Attempt: a.meta.Attempt}
	var runErr error
	switch v, verr := strconv.Atoi(hdr.Get(HeaderVersion)); {
	case hdr.Get(HeaderKind) != h.kind:
		runErr = worker.WithCode(worker.CodeInvalidPayload, fmt.Errorf("message kind %q on the subject of kind %q", hdr.Get(HeaderKind), h.kind))
	case verr != nil || v < 1:
		runErr = worker.WithCode(worker.CodeInvalidPayload, fmt.Errorf("payload version header %q", hdr.Get(HeaderVersion)))
	default:
		a.version = v
		if m := hdr.Get(HeaderMetadata); m != "" {
			if err := json.Unmarshal([]byte(m), &a.metadata); err != nil {
				a.metadata = nil // as the PostgreSQL engine: undecodable metadata reads as none
			}
		}
	}
	if runErr == nil && a.meta.Attempt > a.maxAtt {
		// Earlier deliveries never reported an outcome (a crash, or AckWait passed): as an
		// expired lease in the PostgreSQL engine, they used up the budget.
		runErr = worker.WithCode(worker.CodeLeaseExpired, fmt.Errorf("delivered %d times, at most %d attempts: earlier attempts did not finish", a.meta.Attempt, a.maxAtt))
		w.deadLetter(ctx, msg, h, a, worker.CodeLeaseExpired, runErr, &out)
		return
	}
	var code worker.ErrorCode
	var delay time.Duration
	hctx := ctx
	if runErr == nil {
		hctx, runErr = w.run(ctx, h, msg, a)
	}
	if runErr == nil {
		out.Transition = worker.OutcomeSucceeded
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := msg.DoubleAck(actx); err != nil {
			out.Err = fmt.Errorf("ack: %w", err)
			w.ackErrors.Add(1)
		} else {
			w.succeeded.Add(1)
		}
		cancel()
		w.report(out)
		return
	}
	out.Err = runErr
	if errors.Is(context.Cause(hctx), worker.ErrWorkerStopping) {
		out.Transition = worker.OutcomeReleased
		w.released.Add(1)
		if err := msg.Nak(); err != nil {
			w.ackErrors.Add(1)
		}
		w.report(out)
		return
	}
	code, delay = worker.Classify(hctx, runErr)
	out.Code = code
	if code.Permanent() || a.meta.Attempt >= a.maxAtt {
		w.deadLetter(ctx, msg, h, a, code, runErr, &out)
		return
	}
	if delay <= 0 {
		delay = h.opts.Retry.Delay(a.meta.Attempt, code)
	}
	out.Transition, out.Delay = worker.OutcomeRetried, delay
	if err := msg.NakWithDelay(delay); err != nil {
		out.Err = errors.Join(runErr, fmt.Errorf("nak: %w", err))
		w.ackErrors.Add(1)
	} else {
		w.retried.Add(1)
	}
	w.cfg.Logger.Debug("tenurenats: attempt failed, retrying", "kind", h.kind, "seq", out.Seq, "attempt", out.Attempt, "code", code, "delay", delay, "err", runErr)
	w.report(out)
}

// run runs the handler with the attempt's timeout, keeps the message in progress every
// Lease/3 while it runs, and recovers panics (code PANIC).
func (w *Worker) run(ctx context.Context, h *handler, msg jetstream.Msg, a jobAttempt) (hctx context.Context, err error) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if h.opts.Timeout > 0 {
		var stop context.CancelFunc
		hctx, stop = context.WithTimeoutCause(hctx, h.opts.Timeout, worker.ErrHandlerTimeout)
		defer stop()
	}
	if w.cfg.Pool != nil {
		hctx = worker.WithExternalAttempt(hctx, worker.ExternalAttempt{Job: &a.meta,
			KeyPrefix: w.cfg.EffectKeyPrefix + "nats:" + w.cfg.Stream + ":", Ledger: &streamLedger{q: natsdb.New(w.sch.Wrap(w.cfg.Pool)), stream: w.cfg.Stream, seq: a.meta.ID}})
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(h.opts.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					w.cfg.Logger.Warn("tenurenats: in-progress acknowledgement failed", "kind", h.kind, "seq", a.meta.ID, "err", err)
				}
			}
		}
	}()
	defer close(done)
	defer func() {
		if p := recover(); p != nil {
			err = worker.WithCode(worker.CodePanic, fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
		}
	}()
	return hctx, h.run(hctx, a)
}

// deadLetter publishes the job to the dead-letter subject, then terminates the message. When
// the dead letter cannot be published the message is Nak'ed with a delay instead: it comes back
// (its attempt budget spent) and is dead-lettered then.
func (w *Worker) deadLetter(ctx context.Context, msg jetstream.Msg, h *handler, a jobAttempt, code worker.ErrorCode, cause error, out *Outcome) {
	out.Transition, out.Code, out.Err = worker.OutcomeDead, code, cause
	m := nats.NewMsg(w.cfg.DeadLetterPrefix + "." + h.kind)
	m.Data = msg.Data()
	for k, vs := range msg.Headers() {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			m.Header[k] = vs
		}
	}
	text := strings.NewReplacer("\r", " ", "\n", " ", "\x00", "").Replace(strings.ToValidUTF8(cause.Error(), "\uFFFD"))
	if len(text) > 2000 {
		text = strings.ToValidUTF8(text[:2000], "")
	}
	m.Header.Set(HeaderErrorCode, string(code))
	m.Header.Set(HeaderError, text)
	m.Header.Set(HeaderAttempts, strconv.Itoa(a.meta.Attempt))
	m.Header.Set(HeaderSource, w.cfg.Stream)
	m.Header.Set(HeaderSourceSeq, strconv.FormatInt(a.meta.ID, 10))
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := w.js.PublishMsg(pctx, m, jetstream.WithMsgID(fmt.Sprintf("dead:%s:%d", w.cfg.Stream, a.meta.ID))); err != nil {
		w.ackErrors.Add(1)
		out.Err = errors.Join(cause, fmt.Errorf("dead letter: %w", err))
		w.cfg.Logger.Error("tenurenats: dead letter not published; the job comes back later", "kind", h.kind, "seq", a.meta.ID,
			"subject", m.Subject, "err", err)
		_ = msg.NakWithDelay(h.opts.Retry.Delay(a.meta.Attempt, code))
		w.report(*out)
		return
	}
	if err := msg.Term(); err != nil {
		w.ackErrors.Add(1)
		out.Err = errors.Join(cause, fmt.Errorf("term: %w", err))
	} else {
		w.dead.Add(1)
	}
	w.cfg.Logger.Warn("tenurenats: job dead", "kind", h.kind, "seq", a.meta.ID, "attempt", a.meta.Attempt, "code", code, "err", cause)
	w.report(*out)
}

func (w *Worker) report(o Outcome) {
	if w.cfg.OnOutcome != nil {
		w.cfg.OnOutcome(o)
	}
}

func (w *Worker) pruneEffects(ctx context.Context) {
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		q := natsdb.New(w.sch.Wrap(w.cfg.Pool))
		for ctx.Err() == nil {
			n, err := q.StreamEffectPrune(ctx, natsdb.StreamEffectPruneParams{Before: time.Now().Add(-w.cfg.EffectRetention), Batch: 10000})
			if err != nil {
				w.cfg.Logger.Warn("tenurenats: effect ledger pruning failed", "err", err)
			}
			if err != nil || n < 10000 {
				break
			}
		}
	}
}

// streamLedger is the effect ledger of JetStream jobs: S.stream_effects of Config.Schema.
type streamLedger struct {
	q      *natsdb.Queries // on Config.Pool, in Config.Schema
	stream string
	seq    int64
}

func (l *streamLedger) GetEffect(ctx context.Context, key string) (worker.EffectRecord, bool, error) {
	rec, err := l.q.StreamEffectGet(ctx, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return worker.EffectRecord{}, false, nil
	}
	if err != nil {
		return worker.EffectRecord{}, false, err
	}
	out := worker.EffectRecord{Key: key, Generation: rec.Generation, Result: rec.Result}
	if rec.Refused != nil {
		out.Refused = *rec.Refused
	}
	return out, true, nil
}

func (l *streamLedger) RecordEffect(ctx context.Context, rec worker.EffectRecord) (worker.EffectRecord, error) {
	row, err := l.q.StreamEffectRecord(ctx, natsdb.StreamEffectRecordParams{Key: rec.Key, Stream: l.stream, Seq: l.seq,
		Name: rec.Name, Generation: rec.Generation, Result: rec.Result, Refused: rec.Refused})
	if err != nil {
		return worker.EffectRecord{}, err
	}
	out := worker.EffectRecord{Key: rec.Key, JobID: rec.JobID, Name: rec.Name, Generation: row.Generation, Result: row.Result}
	if row.Refused != nil {
		out.Refused = *row.Refused
	}
	return out, nil
}
