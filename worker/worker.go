package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

// Worker runs handlers for the jobs of its queues. Create it with New, register handlers with
// Register, then Start it; Stop it gracefully before the process exits.
type Worker struct {
	cfg  Config
	pool *pgxpool.Pool // the application's pool, used by handler-side helpers (Effect)
	eng  *pgxpool.Pool // the engine's own pool
	q    *gen.Queries  // on eng
	// client is the jobs client on eng, for the housekeeping the jobs package already owns
	// (retention pruning).
	client *jobs.Client
	log    *slog.Logger
	reg    *generics.Registry
	m      *metrics

	mu       sync.Mutex
	handlers map[string]*handler
	state    int // 0 new, 1 started, 2 stopping/stopped
	ownEng   bool
	stopOnce sync.Once
	stopDone chan struct{}
	stopErr  error

	queues map[string]*queueRunner

	activeMu sync.Mutex
	active   map[int64]*execution

	finishCh     chan *execution
	finishMu     sync.RWMutex // guards sending on finishCh against its close
	finishClosed bool

	// handlerBase is the parent of every handler context; cancelled (cause ErrWorkerStopping)
	// on hard stop.
	handlerBase       context.Context
	cancelHandlerBase context.CancelCauseFunc
	// loops is the context of claim loops (cancelled first, at soft stop); bg of heartbeat,
	// reclaim, prune and listener loops (cancelled last).
	loops, bg             context.Context
	cancelLoops, cancelBg context.CancelFunc
	claimWG, bgWG         sync.WaitGroup
	handlersWG            sync.WaitGroup
	finishersWG           sync.WaitGroup
	stopping              atomic.Bool
	heartbeatAll          atomic.Bool // heartbeat every running job on the next tick
}

// New returns a worker that claims from pool's database. pool is the application's pool;
// the engine runs its own statements on Config.EnginePool or a private pool made from pool's
// configuration. The schema must be migrated.
func New(pool *pgxpool.Pool, cfg *Config) (*Worker, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pool must not be nil", ErrInvalidConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg: c, pool: pool, log: c.Logger.With("worker", c.ID), reg: c.Registry, m: newMetrics(),
		handlers: map[string]*handler{}, queues: map[string]*queueRunner{}, active: map[int64]*execution{},
		stopDone: make(chan struct{}),
	}
	for name, qc := range c.Queues {
		w.queues[name] = newQueueRunner(w, name, qc)
	}
	return w, nil
}

// ID returns the worker's id (locked_by of the jobs it owns).
func (w *Worker) ID() string { return w.cfg.ID }

// Registry returns the worker's kind registry. Pass it to jobs.Config.Registry so enqueues use
// the kinds' defaults and refuse unregistered kinds.
func (w *Worker) Registry() *generics.Registry { return w.reg }

// handler is one registered kind.
type handler struct {
	kind string
	opts HandlerOptions
	run  func(ctx context.Context, e *execution) error
}

// Register adds the handler of args type A. It must be called before Start. The kind's
// options (lease, max attempts, queue, priority, upgraders) are recorded in the registry.
func Register[A generics.Args](w *Worker, fn func(ctx context.Context, job *generics.Job[A]) error, opts *HandlerOptions) error {
	if fn == nil {
		return fmt.Errorf("%w: nil handler", ErrInvalidConfig)
	}
	var zero A
	kind := zero.Kind()
	o, err := opts.withDefaults(kind)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != 0 {
		return fmt.Errorf("%w: register %q before Start", ErrAlreadyStarted, kind)
	}
	if _, dup := w.handlers[kind]; dup {
		return fmt.Errorf("%w: %q", generics.ErrDuplicateKind, kind)
	}
	kopts := []generics.KindOption{generics.WithDefaults(generics.KindDefaults{
		Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts, Lease: o.Lease,
	})}
	if len(o.Upgraders) > 0 {
		kopts = append(kopts, generics.WithUpgrader(o.Upgraders...))
	}
	if _, err := generics.Register[A](w.reg, kopts...); err != nil {
		return err
	}
	w.handlers[kind] = &handler{kind: kind, opts: o, run: func(ctx context.Context, e *execution) error {
		args, err := generics.Decode[A](w.reg, e.c.payload, e.c.version)
		if err != nil {
			return WithCode(CodeInvalidPayload, err)
		}
		job := &generics.Job[A]{
			Args: args, ID: e.c.id, Kind: e.c.kind, Queue: e.c.queue, Priority: e.c.priority,
			Attempt: e.c.attempt, MaxAttempts: e.c.maxAttempts, Generation: e.c.generation,
			ClaimToken: e.c.token, RunAt: e.c.runAt, CreatedAt: e.c.createdAt,
			ClaimedAt: e.c.attemptedAt, LeaseUntil: e.c.lockedUntil, Lease: e.c.lease,
		}
		return fn(ctx, job)
	}}
	return nil
}

// MustRegister is Register that panics on error.
func MustRegister[A generics.Args](w *Worker, fn func(ctx context.Context, job *generics.Job[A]) error, opts *HandlerOptions) {
	if err := Register(w, fn, opts); err != nil {
		panic(err)
	}
}

// Start starts the claim loops, the heartbeat, the lease-expiry sweep, pruning and the
// LISTEN connection, and returns. Cancelling ctx hard-stops the worker (like Stop with an
// expired context); call Stop to wait for that.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != 0 {
		return ErrAlreadyStarted
	}
	if w.cfg.EnginePool != nil {
		w.eng = w.cfg.EnginePool
	} else {
		pc := w.pool.Config().Copy()
		pc.MaxConns = int32(w.cfg.EngineConns)
		pc.MinConns = 0
		if pc.ConnConfig.RuntimeParams == nil {
			pc.ConnConfig.RuntimeParams = map[string]string{}
		}
		// The engine's statements are written to plan well generically (primary-key lookups,
		// partial-index range scans; TestClaimPlansUseThePartialIndex checks it), and they run
		// thousands of times a second: re-planning each execution would cost more PostgreSQL
		// CPU than running it, at low load where claims take one job at a time.
		pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
		if !w.cfg.SynchronousCommit {
			pc.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		}
		eng, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return fmt.Errorf("tenure: engine pool: %w", err)
		}
		w.eng, w.ownEng = eng, true
	}
	w.q = gen.New(w.eng)
	w.client, _ = jobs.NewClient(w.eng, &jobs.Config{Registry: w.reg, Logger: w.log}) // fails only on a nil pool
	w.state = 1
	w.finishCh = make(chan *execution, 4096)
	w.handlerBase, w.cancelHandlerBase = context.WithCancelCause(context.WithoutCancel(ctx))
	w.loops, w.cancelLoops = context.WithCancel(context.WithoutCancel(ctx))
	w.bg, w.cancelBg = context.WithCancel(context.WithoutCancel(ctx))

	for range w.cfg.Finishers {
		w.finishersWG.Add(1)
		go w.finisher()
	}
	w.bgWG.Add(4)
	go w.heartbeatLoop()
	go w.reclaimLoop()
	go w.pruneLoop()
	go w.listenLoop()
	for _, q := range w.queues {
		for range q.cfg.Claimers {
			w.claimWG.Add(1)
			go q.loop()
		}
	}
	go func() {
		select {
		case <-ctx.Done():
			expired, cancel := context.WithCancel(context.Background())
			cancel()
			_ = w.Stop(expired)
		case <-w.stopDone:
		}
	}()
	w.log.Info("tenure: worker started", "queues", len(w.queues), "kinds", len(w.handlers))
	return nil
}

// Stop stops the worker. Soft stop first: nothing new is claimed and running handlers may
// finish until ctx ends. Then hard stop: handler contexts are cancelled (cause
// ErrWorkerStopping) and get HardStopGrace to return; pending finishes are flushed; jobs still
// held (handlers that ignored cancellation) are released with a fenced write, so no job stays
// running after a clean stop. Every engine goroutine has returned when Stop returns; if some
// handler goroutines ignore their context, Stop returns ErrHandlersStillRunning. Stop may be
// called more than once; later calls wait for the first.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if w.state == 0 {
		w.mu.Unlock()
		return ErrNotStarted
	}
	w.state = 2
	w.mu.Unlock()
	w.stopOnce.Do(func() {
		go func() {
			w.stopErr = w.stop(ctx)
			close(w.stopDone)
		}()
	})
	<-w.stopDone
	return w.stopErr
}

func (w *Worker) stop(ctx context.Context) error {
	w.stopping.Store(true)
	w.cancelLoops()
	w.claimWG.Wait()

	handlersDone := make(chan struct{})
	go func() { w.handlersWG.Wait(); close(handlersDone) }()
	var stillRunning bool
	select {
	case <-handlersDone:
	case <-ctx.Done():
		w.log.Warn("tenure: stop deadline reached, cancelling handlers", "running", w.running())
		w.cancelHandlerBase(ErrWorkerStopping)
		select {
		case <-handlersDone:
		case <-time.After(w.cfg.HardStopGrace):
			stillRunning = true
		}
	}
	// Flush every finish the returned handlers queued.
	w.closeFinish()
	w.finishersWG.Wait()
	// Whatever is still held belongs to handlers that ignore their context: give it back.
	w.releaseHeld()
	w.cancelBg()
	w.bgWG.Wait()
	w.cancelHandlerBase(ErrWorkerStopping)
	if w.ownEng {
		w.eng.Close()
	}
	w.log.Info("tenure: worker stopped", "succeeded", w.m.succeeded.Load(), "stale_rejected", w.m.staleRejected.Load())
	if stillRunning {
		return ErrHandlersStillRunning
	}
	return nil
}

func (w *Worker) running() int {
	w.activeMu.Lock()
	defer w.activeMu.Unlock()
	return len(w.active)
}

// Stats returns a snapshot of the engine's counters.
func (w *Worker) Stats() Stats {
	m := w.m
	s := Stats{
		WorkerID: w.cfg.ID,
		Claims:   m.claims.Load(), EmptyClaims: m.emptyClaims.Load(), ClaimErrors: m.claimErrors.Load(), Claimed: m.claimed.Load(), ClaimAsked: m.claimAsked.Load(),
		Succeeded: m.succeeded.Load(), Retried: m.retried.Load(), Dead: m.dead.Load(), Cancelled: m.cancelled.Load(), Released: m.released.Load(),
		StaleRejected: m.staleRejected.Load(), FinishRetries: m.finishRetries.Load(), FinishAbandoned: m.finishAbandoned.Load(),
		Heartbeats: m.heartbeats.Load(), HeartbeatRows: m.heartbeatRows.Load(), HeartbeatErrors: m.heartbeatErrors.Load(), LeasesLost: m.leasesLost.Load(),
		CancelSignals: m.cancelSignals.Load(), Stuck: m.stuck.Load(), LateFinishes: m.lateFinishes.Load(), Panics: m.panics.Load(),
		Reclaimed: m.reclaimed.Load(), ReclaimedDead: m.reclaimedDead.Load(), Pruned: m.pruned.Load(),
		ListenerReconnects: m.listenerReconnects.Load(), Running: w.running(),
		ClaimP50: m.claimLatency.Quantile(0.5), ClaimP99: m.claimLatency.Quantile(0.99),
		FinishP50: m.finishLatency.Quantile(0.5), FinishP99: m.finishLatency.Quantile(0.99),
		ErrorCodes: map[ErrorCode]int64{},
	}
	if ns := m.lastSuccess.Load(); ns != 0 {
		s.LastSuccess = time.Unix(0, ns)
	}
	m.mu.Lock()
	for k, h := range m.wait {
		s.Wait = append(s.Wait, WaitStats{Queue: k.queue, Priority: k.priority, Count: h.Count(),
			P50: h.Quantile(0.5), P95: h.Quantile(0.95), P99: h.Quantile(0.99), Max: h.Max()})
	}
	for c, n := range m.codes {
		s.ErrorCodes[c] = n
	}
	m.mu.Unlock()
	sort.Slice(s.Wait, func(i, j int) bool {
		if s.Wait[i].Queue != s.Wait[j].Queue {
			return s.Wait[i].Queue < s.Wait[j].Queue
		}
		return s.Wait[i].Priority > s.Wait[j].Priority
	})
	return s
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
