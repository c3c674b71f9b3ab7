package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/internal/engineconf"
	"github.com/tenureq/tenure/internal/logkey"
	"github.com/tenureq/tenure/internal/pgfast"
	"github.com/tenureq/tenure/jobs"
)

// Engine runs handlers for the jobs of its queues: package worker's Worker builds one (New)
// from the public configuration, adds the registered kinds (AddHandler), and starts and stops
// it. It never sees the public configuration types: Config is already validated and
// defaulted.
//
// Goroutines and what each owns (docs/design.md draws them):
//   - one loop per queue (queue.go) owns that queue's slots, active executions, claim backoff,
//     watermarks, fairness state and heartbeat schedule;
//   - claim statements run on claim goroutines (reused: an idle one takes the queue's next
//     claim, claim.go, runClaim), heartbeat statements on short-lived goroutines; both report
//     to their loop;
//   - with more than one queue, one claim batcher (claimbatch.go) owns the pending plain
//     ordered claims of every queue and runs them together, one statement for many queues;
//   - one goroutine per running handler (execute.go), or per batch call of a batch kind
//     (batch.go: one message with a finish per job), reports its result to its loop;
//   - Finishers goroutines (finish.go) write finishes in batches and report back to the loops;
//   - six services (reclaim, prune, listen, registry, queue state, periodic) run until Stop
//     begins.
//
// The Engine itself holds only what is fixed at Start (configuration, pools, handlers) and
// the lifecycle below.
type Engine struct {
	cfg  Config
	pool *pgxpool.Pool // the application's pool, used by handler-side helpers (Effect)
	eng  *pgxpool.Pool // the engine's own pool
	q    *gen.Queries  // on eng, in sch
	// sch is Config.Schema: every statement runs through sch.Wrap (qon), the listener listens
	// on its channels, and the advisory locks are its keys.
	sch *dbschema.Schema
	// client is the jobs client on eng, for the housekeeping the jobs package already owns
	// (retention pruning).
	client *jobs.Client
	log    *slog.Logger
	reg    *generics.Registry
	m      *Metrics
	clk    Clock // time for the engine's own timing decisions (engine/clock.go); a fake in tests

	handlers map[string]*Handler // fixed at Start
	kinds    claimKinds          // what the claim may take, fixed at Start
	queues   map[string]*queue
	finishCh chan *Execution
	writeCh  chan []*Execution // batcher → finishers (unbuffered: a batch goes only to a free finisher)
	awaitCh  chan []int64      // listener → batcher: ids of jobs a jobs.Client waits for (finish.go)
	lockWait chan struct{}     // lockWaiters tokens: finishes waiting on another session's row lock
	periodic []*Periodic       // Config.Periodic, validated

	// claimIn: queue loops → the claim batcher (claimbatch.go); nil when the worker serves a
	// single queue (no batcher: its claims run their own statements).
	claimIn *claimIntake
	// slots: the worker-wide slot pool the queues share (slotpool.go); nil: Config.Slots 0,
	// each queue has its Concurrency to itself.
	slots *slotPool

	// queueStateCh asks the queue state service to read the paused queues now (the listener
	// got a NOTIFY tenure_queues, or reconnected).
	queueStateCh chan struct{}
	// queueStateReads counts the queue state service's reads (QueueStateReads, for tests).
	queueStateReads atomic.Int64

	// base is the parent of handler contexts (Start's context without its cancellation);
	// engCtx bounds every engine statement and goroutine (cancelled at the end of Stop, or at
	// its deadline); svcCtx the services (cancelled when Stop begins).
	base, engCtx, svcCtx context.Context
	cancelEng, cancelSvc context.CancelFunc
	engWG                sync.WaitGroup // loops, finishers, services, statement goroutines

	deferLogged sync.Map // kinds whose deferral was logged

	started        time.Time // when Start ran, for the registry
	skipDeregister bool      // tests: leave the registry row behind, as a killed process does
	noRide         bool      // tests and benchmarks: completions never ride on claims (claim.go)
	noClaimBatch   bool      // tests: every claim runs its own statement (claimbatch.go)
	// Statement deadlines set by tests (SetStatementDeadlines, also while running); zero:
	// claimTimeout and finishTimeout (claimDeadline, firstFinishDeadline; a finish's tries
	// grow theirs: finishDeadline).
	testClaimDeadline, testFinishDeadline atomic.Int64
	// Repeated engine failures are logged at most once per ErrorLogEvery per source.
	claimLog, heartbeatLog, reclaimLog, pruneLog, finishLog, registryLog, listenLog, periodicLog, pauseLog, doneLog LogThrottle
	// done sends the done signal of what the finishes ended, after their commits
	// (donenotify.go); its Run goroutine is started with the finishers.
	done *DoneNotifier

	mu       sync.Mutex
	state    int // 0 new, 1 started, 2 stopping/stopped
	ownEng   bool
	stopOnce sync.Once
	stopDone chan struct{}
	// deadlineHit: a Stop caller's context ended before the stop did (what was left was
	// abandoned).
	deadlineHit atomic.Bool
	// stopping: Stop has begun (finishers stop lingering: what a stop waits for is written at
	// once).
	stopping atomic.Bool
	stopErr  error
}

// claimKinds lists the kinds this worker runs, with the newest payload version it knows of
// each and the lease it declares for it (0: the job's own), as claim statement arguments.
type claimKinds struct {
	names    []string
	versions []int32
	leaseMs  []int32
}

// Engine statement deadlines: a dead connection costs seconds, not a TCP timeout.
const (
	claimTimeout     = 10 * time.Second
	finishTimeout    = 10 * time.Second
	heartbeatTimeout = 5 * time.Second
	sweepTimeout     = 10 * time.Second
)

// finishBuffer is how many finishes may wait for a finisher; queue loops keep the rest in
// their pending lists (they never block on a finisher).
const finishBuffer = 4096

// New returns an engine that claims from pool's database (the application's pool: Start
// makes the engine's own from it unless cfg.EnginePool is set). cfg is complete: package
// worker validated it and filled its defaults.
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	w := &Engine{
		sch: cfg.Schema, cfg: cfg, pool: pool, log: cfg.Logger.With(logkey.Worker, cfg.ID), reg: cfg.Registry, m: newMetrics(),
		handlers: map[string]*Handler{}, queues: map[string]*queue{}, stopDone: make(chan struct{}),
		queueStateCh: make(chan struct{}, 1), lockWait: make(chan struct{}, lockWaiters), clk: RealClock{},
		periodic: cfg.Periodic, done: NewDoneNotifier(),
	}
	for _, t := range []*LogThrottle{&w.claimLog, &w.heartbeatLog, &w.reclaimLog, &w.pruneLog, &w.finishLog, &w.registryLog, &w.listenLog, &w.periodicLog, &w.pauseLog, &w.doneLog} {
		t.Every = ErrorLogEvery
	}
	for name, qc := range cfg.Queues {
		w.queues[name] = newQueue(w, name, qc)
	}
	return w
}

// Metrics returns the engine's counters (worker.Worker.Stats reads them).
func (w *Engine) Metrics() *Metrics { return w.m }

// PausedQueues returns the engine's queues an operator paused, as the engine last saw them,
// in no particular order.
func (w *Engine) PausedQueues() []string {
	var out []string
	for name, q := range w.queues {
		if q.pausedFlag.Load() {
			out = append(out, name)
		}
	}
	return out
}

// AddHandler adds a registered kind before Start: ErrAlreadyStarted after it, and
// generics.ErrDuplicateKind for a kind added before. record (the kind's registration in the
// registry) runs under the same lock, before the kind is added; its error is returned as is.
func (w *Engine) AddHandler(h *Handler, record func() error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != 0 {
		return fmt.Errorf("%w: register %q before Start", ErrAlreadyStarted, h.kind)
	}
	if _, dup := w.handlers[h.kind]; dup {
		return fmt.Errorf("%w: %q", generics.ErrDuplicateKind, h.kind)
	}
	if err := record(); err != nil {
		return err
	}
	w.handlers[h.kind] = h
	return nil
}

// Pool returns the application's pool (the handler-side helpers' statements run on it).
func (w *Engine) Pool() *pgxpool.Pool { return w.pool }

// Queries returns the generated queries on db in the engine's schema.
func (w *Engine) Queries(db gen.DBTX) *gen.Queries { return w.qon(db) }

// qon returns the generated queries on db (the engine pool, a connection or a transaction), in
// the worker's schema.
func (w *Engine) qon(db gen.DBTX) *gen.Queries { return gen.New(w.sch.Wrap(db)) }

// inTx runs fn in a transaction on the engine pool, its statements under ctx. Once fn has
// returned nil, the COMMIT is sent and its answer awaited even if ctx ends meanwhile (a Stop,
// a deadline), for at most sweepTimeout: a COMMIT cancelled once sent may still commit on the
// server, and a caller told it failed would skip what follows a commit (its counters, done
// signals). An error or a panic of fn rolls back.
func (w *Engine) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := w.eng.Begin(ctx)
	if err != nil {
		return err
	}
	detached := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), sweepTimeout)
	}
	defer func() { // after Commit a no-op; fn's error is the one that matters
		rctx, cancel := detached()
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := fn(tx); err != nil {
		return err
	}
	cctx, cancel := detached()
	defer cancel()
	return tx.Commit(cctx)
}

// Schema returns the schema the worker works in (Config.Schema; "tenure" by default).
func (w *Engine) Schema() string { return w.sch.Name() }

// ID returns the worker's id (locked_by of the jobs it owns).
func (w *Engine) ID() string { return w.cfg.ID }

// Registry returns the worker's kind registry. Pass it to jobs.Config.Registry so enqueues use
// the kinds' defaults and refuse unregistered kinds.
func (w *Engine) Registry() *generics.Registry { return w.reg }

// Start checks the database (it answers, the engine's role holds every privilege the
// configuration needs: ErrPermission otherwise, and its schema is at the version this release
// expects: ErrSchemaBehind / ErrSchemaAhead otherwise), then starts the queue loops, the
// finishers, the lease-expiry sweep, pruning and the LISTEN connection, and returns.
//
// Cancelling ctx begins a graceful stop, like Stop with a deadline ShutdownTimeout away:
// nothing new is claimed, running handlers may finish, and HardStopGrace before that deadline
// the handlers still running are cancelled and their jobs released. The natural shutdown is
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	w.Start(ctx)
//	<-ctx.Done()
//	w.Stop(shutdownCtx) // waits for the stop ctx began; an earlier deadline tightens it
//
// Call Stop after cancelling ctx to wait for the stop (and to learn its result).
func (w *Engine) Start(ctx context.Context) error {
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
		// Generic plans, never a sequential scan of tenure.jobs (internal/engineconf says why;
		// TestEngineStatementsPlanIndexPathsOnATinyTable checks it).
		for k, v := range engineconf.Settings {
			pc.ConnConfig.RuntimeParams[k] = v
		}
		if w.cfg.AsynchronousCommit {
			pc.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		}
		// Direct encode and scan plans for the engine statements' uuid and nullable columns
		// (internal/pgfast says which pgx paths they replace); the application's hook still runs.
		after := pc.AfterConnect
		pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			pgfast.Register(c.TypeMap()) // worker.RegisterEngineTypes for a pool of your own
			if after != nil {
				return after(ctx, c)
			}
			return nil
		}
		eng, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return fmt.Errorf("tenure: engine pool: %w", err)
		}
		w.eng, w.ownEng = eng, true
	}
	if err := w.checkDatabase(ctx); err != nil {
		w.closeEngine()
		return err
	}
	w.q = w.qon(w.eng)
	client, err := jobs.NewClient(w.eng, &jobs.Config{Registry: w.reg, Logger: w.log, Schema: w.sch.Name()})
	if err != nil {
		return fmt.Errorf("tenure: engine client: %w", err)
	}
	w.client = client
	for _, p := range w.periodic {
		if _, ok := w.reg.Lookup(p.Kind); !ok {
			w.closeEngine()
			return fmt.Errorf("%w: %w: periodic %q: kind %q is not registered (register a handler, or generics.Register it in Config.Registry)",
				ErrInvalidConfig, ErrInvalidSchedule, p.Name, p.Kind)
		}
	}
	// Before any loop claims: a queue paused now is never claimed from by this worker.
	pctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
	paused, err := w.pausedQueues(pctx)
	if err == nil {
		err = w.registerPeriodic(pctx)
	}
	cancel()
	if err != nil {
		w.closeEngine()
		return fmt.Errorf("tenure: start: %w", err)
	}
	for name, q := range w.queues {
		q.paused = paused[name]
		q.pausedFlag.Store(q.paused)
	}
	w.kinds = claimKinds{}
	names := make([]string, 0, len(w.handlers))
	for k := range w.handlers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		h := w.handlers[k]
		w.kinds.names = append(w.kinds.names, k)
		w.kinds.versions = append(w.kinds.versions, int32(h.version))
		w.kinds.leaseMs = append(w.kinds.leaseMs, int32(h.opts.Lease.Milliseconds()))
	}
	w.state = 1
	w.started = time.Now()
	w.finishCh = make(chan *Execution, finishBuffer)
	w.awaitCh = make(chan []int64, awaitBuffer)
	w.base = context.WithoutCancel(ctx)
	w.engCtx, w.cancelEng = context.WithCancel(w.base)
	w.svcCtx, w.cancelSvc = context.WithCancel(w.engCtx)

	w.writeCh = make(chan []*Execution)
	w.spawn(func() { w.batcher(w.engCtx) })
	w.spawn(func() {
		// Until the engine context ends, which Stop does after every queue loop ended, so after
		// the last settle; then one last send of at most doneLastSend.
		w.done.Run(w.engCtx, doneLastSend, w.sendDone, func(err error) { w.engineError(&w.doneLog, "done signal", err) })
	})
	for range w.cfg.Finishers {
		w.spawn(func() { w.finisher(w.engCtx) })
	}
	if len(w.queues) > 1 && !w.noClaimBatch {
		w.claimIn = newClaimIntake()
		w.spawn(func() { w.claimBatcher(w.engCtx) })
	}
	for _, svc := range []func(context.Context){w.reclaimService, w.pruneService, w.listenService, w.registryService,
		w.queueStateService, w.periodicService} {
		w.spawn(func() { svc(w.svcCtx) })
	}
	if w.cfg.Slots > 0 {
		w.slots = newSlotPool(w.cfg.Slots)
	}
	for _, q := range w.queues {
		w.spawn(func() { q.loop(w.engCtx) })
	}
	go func() {
		select {
		case <-ctx.Done():
			w.stopOnCancel()
		case <-w.stopDone:
		}
	}()
	w.warnUnservedQueues()
	w.log.Info("tenure: worker started", "queues", len(w.queues), "kinds", len(w.handlers))
	return nil
}

// closeEngine undoes Start's engine pool when Start fails.
func (w *Engine) closeEngine() {
	if w.ownEng {
		w.eng.Close()
	}
	w.eng, w.ownEng, w.q, w.client = nil, false, nil, nil
}

// warnUnservedQueues logs, at Start, each registered kind whose default queue this worker does
// not serve: its jobs wait until some other worker serves that queue. It is a warning, not an
// error, because splitting queues across processes (pools) is a supported layout; a process
// that only enqueues can refuse such inserts with jobs.Config.Queues.
func (w *Engine) warnUnservedQueues() {
	served := make([]string, 0, len(w.queues))
	for name := range w.queues {
		served = append(served, name)
	}
	sort.Strings(served)
	for _, k := range w.kinds.names {
		q := w.handlers[k].opts.Queue
		if q == "" {
			q = jobs.DefaultQueue
		}
		if _, ok := w.queues[q]; !ok {
			w.log.Warn("tenure: a registered kind's queue is not served by this worker: its jobs wait for a worker that serves it (add the queue to Config.Queues, or run one elsewhere)",
				logkey.Kind, k, logkey.Queue, q, "served", served)
		}
	}
}

// startCheckTimeout bounds Start's database checks.
const startCheckTimeout = 15 * time.Second

// checkDatabase makes Start fail on a database the engine cannot use: one that does not
// answer, or one Config.CheckDatabase refuses (package worker: the role's privileges, the
// schema's version).
func (w *Engine) checkDatabase(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
	defer cancel()
	if err := w.eng.Ping(cctx); err != nil {
		return fmt.Errorf("tenure: start: database unreachable: %w", err)
	}
	if w.cfg.CheckDatabase == nil {
		return nil
	}
	return w.cfg.CheckDatabase(cctx, w.eng)
}

// spawn runs fn on an engine goroutine that Stop waits for.
func (w *Engine) spawn(fn func()) {
	w.engWG.Add(1)
	go func() {
		defer w.engWG.Done()
		fn()
	}()
}

// Stop stops the worker and returns by ctx's deadline, always.
//
// Soft stop first: nothing new is claimed and running handlers may finish. HardStopGrace
// before the deadline (at most half of the time left), handler contexts are cancelled (cause
// ErrWorkerStopping); a handler that returns then has its job released without charging the
// attempt. A quarter into that reserve, the jobs of handlers that still have not returned
// (they ignore their context) are released with a fenced write, so their late results are
// rejected. At the deadline, whatever is still unwritten is abandoned: reported through
// OnOutcome with ErrFinishAbandoned and left to its lease (the sweep retries it). Without a
// deadline, Stop waits for handlers until ctx is cancelled, then abandons.
//
// Stop returns nil when every job was finished or released; an error that matches
// ErrHandlersStillRunning when handler goroutines ignored cancellation (their jobs were
// released), and one that matches ErrFinishAbandoned when the deadline cut the stop short.
// Every engine goroutine has returned when Stop returns. Stop may be called more than once,
// and after cancelling Start's context (which began a graceful stop): a later call joins the
// stop under way, and when its deadline is earlier it tightens it (handlers are cancelled
// HardStopGrace before the earlier deadline, and what is left is abandoned at it). It returns
// the stop's result, or an error wrapping its ctx's error if ctx ends first.
func (w *Engine) Stop(ctx context.Context) error {
	return w.stopWith(ctx, w.planFor(ctx))
}

// planFor derives the stop plan from ctx's deadline.
func (w *Engine) planFor(ctx context.Context) stopPlan {
	dl, ok := ctx.Deadline()
	if !ok {
		return stopPlan{}
	}
	// Handlers get the first quarter of the reserve to react to cancellation; the fenced
	// release of what they still hold gets the rest, so it lands even on a loaded server.
	reserve := max(min(w.cfg.HardStopGrace, dl.Sub(w.clk.Now())/2), 0)
	return stopPlan{hardAt: dl.Add(-reserve), releaseAt: dl.Add(-reserve * 3 / 4), deadline: dl}
}

// stopOnCancel is what cancelling Start's context does: a graceful stop with a deadline
// ShutdownTimeout away (or, with a negative ShutdownTimeout, a hard stop within
// HardStopGrace).
func (w *Engine) stopOnCancel() {
	if w.cfg.ShutdownTimeout < 0 {
		w.log.Warn("tenure: context cancelled: hard stop (ShutdownTimeout < 0): cancelling handlers now",
			"deadline_in", w.cfg.HardStopGrace.String())
		sctx, cancel := context.WithTimeout(context.Background(), w.cfg.HardStopGrace)
		defer cancel()
		now := time.Now()
		_ = w.stopWith(sctx, stopPlan{hardAt: now, releaseAt: now.Add(w.cfg.HardStopGrace / 4), deadline: now.Add(w.cfg.HardStopGrace)})
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), w.cfg.ShutdownTimeout)
	defer cancel()
	plan := w.planFor(sctx)
	w.log.Info("tenure: context cancelled: graceful stop (no new claims; running handlers may finish)",
		"deadline_in", w.cfg.ShutdownTimeout.String(), "handlers_cancelled_in", time.Until(plan.hardAt).Round(time.Millisecond).String())
	_ = w.stopWith(sctx, plan)
}

// stopWith begins the stop with plan, or, when a stop is already under way, tightens its plan
// to plan's earlier times; then it waits for the stop to end or ctx to end. At ctx's end the
// engine abandons what it still owns (whichever caller's ctx ends first).
func (w *Engine) stopWith(ctx context.Context, plan stopPlan) error {
	w.mu.Lock()
	if w.state == 0 {
		w.mu.Unlock()
		return ErrNotStarted
	}
	w.state = 2
	w.mu.Unlock()
	first := false
	w.stopOnce.Do(func() {
		first = true
		go func() {
			w.stopErr = w.stop(ctx, plan)
			close(w.stopDone)
		}()
	})
	if !first {
		w.tighten(plan)
	}
	// At this caller's deadline every engine statement is cancelled and the loops abandon
	// what is left, so that Stop returns by its deadline even when an earlier stop had a
	// later one.
	abandon := context.AfterFunc(ctx, func() {
		w.deadlineHit.Store(true)
		w.cancelEng()
	})
	defer abandon()
	select {
	case <-w.stopDone:
		return w.stopErr
	case <-ctx.Done():
		select {
		case <-w.stopDone: // the first Stop is ending at the same moment
			return w.stopErr
		case <-time.After(50 * time.Millisecond):
		}
		return fmt.Errorf("tenure: stop still in progress: %w", ctx.Err())
	}
}

// tighten sends a later Stop's plan to the queue loops, which keep the earlier of each time.
func (w *Engine) tighten(plan stopPlan) {
	if plan.hardAt.IsZero() {
		return
	}
	for _, q := range w.queues {
		select {
		case q.stopCh <- plan:
		case <-q.done:
		}
	}
}

func (w *Engine) stop(ctx context.Context, plan stopPlan) error {
	abandonedBefore := w.m.FinishAbandoned.Load()
	w.stopping.Store(true)
	w.cancelSvc() // reclaim, prune, listen: not needed while stopping
	if dl, ok := ctx.Deadline(); ok {
		w.log.Info("tenure: stopping: no new claims; running handlers may finish", "deadline_in", time.Until(dl).Round(time.Millisecond).String())
	} else {
		w.log.Info("tenure: stopping: no new claims; waiting for running handlers (no deadline)")
	}
	for _, q := range w.queues {
		select {
		case q.stopCh <- plan:
		case <-q.done:
		}
	}
	for _, q := range w.queues {
		<-q.done
	}
	w.cancelEng()
	w.engWG.Wait()
	w.releasePermits(ctx)
	w.deregister(ctx)
	if w.ownEng {
		closed := make(chan struct{})
		go func() { w.eng.Close(); close(closed) }()
		select {
		case <-closed:
		case <-ctx.Done():
		}
	}
	m := w.m
	w.log.Info("tenure: worker stopped", "succeeded", m.Succeeded.Load(), "released", m.Released.Load(),
		"stale_rejected", m.StaleRejected.Load(), "abandoned", m.FinishAbandoned.Load()-abandonedBefore)
	var errs []error
	if n := w.m.HandlersRunning.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%w: %d handlers", ErrHandlersStillRunning, n))
	}
	if n := w.m.FinishAbandoned.Load() - abandonedBefore; n > 0 && (ctx.Err() != nil || w.deadlineHit.Load()) {
		errs = append(errs, fmt.Errorf("%w: %d jobs left to their leases at the stop deadline", ErrFinishAbandoned, n))
	}
	return errors.Join(errs...)
}

// Test seams (package worker's export_test.go, and the engine's own tests).

// SkipDeregister leaves the registry row behind at Stop, as a killed process does.
func (w *Engine) SkipDeregister() { w.skipDeregister = true }

// NoRide makes completions never ride on claims (claim.go).
func (w *Engine) NoRide() { w.noRide = true }

// SetClock sets the clock of the engine's own timing decisions (before Start).
func (w *Engine) SetClock(c Clock) { w.clk = c }

// SetStatementDeadlines sets the claim and finish statements' first deadlines (claimTimeout,
// finishTimeout by default, and when given 0); it may be called while the engine runs.
func (w *Engine) SetStatementDeadlines(claim, finish time.Duration) {
	w.testClaimDeadline.Store(int64(claim))
	w.testFinishDeadline.Store(int64(finish))
}

// claimDeadline is a claim statement's deadline: claimTimeout unless a test set another.
func (w *Engine) claimDeadline() time.Duration {
	if d := time.Duration(w.testClaimDeadline.Load()); d > 0 {
		return d
	}
	return claimTimeout
}

// firstFinishDeadline is a finish write's first try's deadline (finishDeadline grows the next
// ones): finishTimeout unless a test set another.
func (w *Engine) firstFinishDeadline() time.Duration {
	if d := time.Duration(w.testFinishDeadline.Load()); d > 0 {
		return d
	}
	return finishTimeout
}
