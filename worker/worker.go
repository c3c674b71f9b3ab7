package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/internal/engineconf"
	"github.com/tenureq/tenure/internal/pgfast"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// Worker runs handlers for the jobs of its queues. Create it with New, register handlers with
// Register, then Start it; Stop it gracefully before the process exits.
//
// A Worker is the public face of its engine (worker/internal/engine: the queue loops, claims,
// handler goroutines, finishers, heartbeats, sweeps and listener; docs/design.md draws them):
// it holds the configuration, builds the engine's from it, and registers the kinds' handlers.
type Worker struct {
	cfg  Config
	pool *pgxpool.Pool // the application's pool
	sch  *dbschema.Schema
	reg  *generics.Registry
	e    *engine.Engine
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
	sch, err := dbschema.New(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: Schema: %w", ErrInvalidConfig, err)
	}
	w := &Worker{sch: sch, cfg: c, pool: pool, reg: c.Registry}
	w.e = engine.New(pool, w.cfg.engineConfig(sch, w.checkDatabase))
	return w, nil
}

// Schema returns the schema the worker works in (Config.Schema; "tenure" by default).
func (w *Worker) Schema() string { return w.sch.Name() }

// ID returns the worker's id (locked_by of the jobs it owns).
func (w *Worker) ID() string { return w.cfg.ID }

// Registry returns the worker's kind registry. Pass it to jobs.Config.Registry so enqueues use
// the kinds' defaults and refuse unregistered kinds.
func (w *Worker) Registry() *generics.Registry { return w.reg }

// Register adds the handler of args type A. It must be called before Start. The kind's
// options (lease, max attempts, queue, priority, upgraders) are recorded in the registry.
func Register[A generics.Args](w *Worker, fn func(ctx context.Context, job *generics.Job[A]) error, opts *HandlerOptions) error {
	if fn == nil {
		return fmt.Errorf("%w: nil handler", ErrInvalidConfig)
	}
	return register[A](w, opts, func(kind string, version int, o HandlerOptions) (*engine.Handler, error) {
		run := func(ctx context.Context, e *engine.Execution) error {
			job := e.Job()
			args, err := generics.Decode[A](w.reg, job.Payload, job.PayloadVersion)
			if err != nil {
				return WithCode(CodeInvalidPayload, err)
			}
			// The handler sees the row the engine keeps (and middleware and the Outcome see).
			return fn(ctx, &generics.Job[A]{Args: args, JobRow: job})
		}
		return engine.NewHandler(kind, version, o.kindOptions(), w.wrap(run, o.Middleware)), nil
	})
}

// register is every kind's registration (Register, RegisterBatch): the options merged with the
// args type's declared defaults and checked, the kind recorded in the registry with them, and
// the handler build returns (given the merged options) kept for Start.
func register[A generics.Args](w *Worker, opts *HandlerOptions, build func(kind string, version int, o HandlerOptions) (*engine.Handler, error)) error {
	var zero A
	kind := zero.Kind()
	merged, declared, err := mergeDeclared[A](kind, opts)
	if err != nil {
		return err
	}
	o, err := merged.withDefaults(kind)
	if err != nil {
		return err
	}
	h, err := build(kind, zero.PayloadVersion(), o)
	if err != nil {
		return err
	}
	rec := generics.KindDefaults{Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts, Lease: o.Lease,
		Timeout: o.Timeout, Unique: declared.Unique, DeleteOnSuccess: o.DeleteOnSuccess}
	if fj, ok := o.Retry.(FullJitter); ok {
		rec.RetryBase, rec.RetryCap = fj.Base, fj.Cap
	}
	kopts := []generics.KindOption{generics.WithDefaults(rec)}
	if len(o.Upgraders) > 0 {
		kopts = append(kopts, generics.WithUpgrader(o.Upgraders...))
	}
	return w.e.AddHandler(h, func() error {
		_, err := generics.Register[A](w.reg, kopts...)
		return err
	})
}

// DeclaredOptions returns opts (nil counts as zero) with its zero Queue, Priority,
// MaxAttempts, Lease, Timeout and nil Retry taken from the defaults args type A declares
// (generics.ArgsWithDefaults; Retry becomes FullJitter{RetryBase, RetryCap}). Options that
// contradict the declaration are refused with ErrDefaultsConflict. Register applies it; so do
// other engines' registrations (tenurenats.Register).
func DeclaredOptions[A generics.Args](opts *HandlerOptions) (HandlerOptions, error) {
	var zero A
	o, _, err := mergeDeclared[A](zero.Kind(), opts)
	if err != nil {
		return HandlerOptions{}, err
	}
	return *o, nil
}

// mergeDeclared fills the zero fields of opts from the defaults args type A declares
// (generics.ArgsWithDefaults) and refuses options that contradict them (ErrDefaultsConflict).
func mergeDeclared[A generics.Args](kind string, opts *HandlerOptions) (*HandlerOptions, generics.KindDefaults, error) {
	var o HandlerOptions
	if opts != nil {
		o = *opts
	}
	d, ok := generics.DefaultsFor[A]()
	if !ok {
		return &o, d, nil
	}
	if err := d.Check(); err != nil {
		return nil, d, fmt.Errorf("%w: kind %q declares %w", ErrInvalidConfig, kind, err)
	}
	given := generics.KindDefaults{Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts, Lease: o.Lease, Timeout: o.Timeout}
	if c := d.Conflicts(given); len(c) > 0 {
		return nil, d, fmt.Errorf("%w: %w: kind %q: %s", ErrInvalidConfig, ErrDefaultsConflict, kind, strings.Join(c, "; "))
	}
	if o.DeleteOnSuccess && d.Unique.HoldsSucceeded() {
		return nil, d, fmt.Errorf("%w: %w: kind %q declares Unique.States %v", ErrInvalidConfig, generics.ErrDeleteOnSuccessUnique, kind, d.Unique.States)
	}
	f := given.Or(d)
	o.Queue, o.Priority, o.MaxAttempts, o.Lease, o.Timeout = f.Queue, f.Priority, f.MaxAttempts, f.Lease, f.Timeout
	o.DeleteOnSuccess = o.DeleteOnSuccess || d.DeleteOnSuccess
	if o.Retry == nil && (d.RetryBase > 0 || d.RetryCap > 0) {
		o.Retry = FullJitter{Base: d.RetryBase, Cap: d.RetryCap}
	}
	return &o, d, nil
}

// MustRegister is Register that panics on error.
func MustRegister[A generics.Args](w *Worker, fn func(ctx context.Context, job *generics.Job[A]) error, opts *HandlerOptions) {
	if err := Register(w, fn, opts); err != nil {
		panic(err)
	}
}

// EngineRuntimeParams returns the session settings the worker gives the connections of its
// private engine pool (plan_cache_mode, enable_seqscan, jit; internal/engineconf says why), to
// set on a Config.EnginePool of your own (pgxpool.Config.ConnConfig.RuntimeParams). The map is
// a copy.
func EngineRuntimeParams() map[string]string {
	return maps.Clone(engineconf.Settings)
}

// RegisterEngineTypes adds the engine's pgx encode and scan plans (uuid parameters and
// elements, nullable columns: internal/pgfast says which slow pgx paths they replace; the
// bytes on the wire are the same) to a connection's type map. The private engine pool does it
// for every connection; for a Config.EnginePool of your own, call it in the pool's
// AfterConnect (with EngineRuntimeParams and EnginePoolSize, the pool is then what the private
// one would be).
func RegisterEngineTypes(m *pgtype.Map) {
	pgfast.Register(m)
}

// EnginePoolSize returns the number of connections of the private engine pool New would make
// for cfg: Config.EngineConns, or its default (see there). Give a Config.EnginePool of your
// own this MaxConns. Errors are New's for an invalid cfg (ErrInvalidConfig).
func EnginePoolSize(cfg *Config) (int, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return 0, err
	}
	return c.EngineConns, nil
}

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
func (w *Worker) Start(ctx context.Context) error { return w.e.Start(ctx) }

// checkDatabase makes Start fail on a database the engine cannot use (the engine checked it
// answers): one whose role lacks a privilege the configuration needs (privileges.go), or whose
// schema is not at the version this release was built for. eng is the engine's pool.
func (w *Worker) checkDatabase(cctx context.Context, eng *pgxpool.Pool) error {
	if err := w.checkPrivileges(cctx, eng); err != nil {
		return err
	}
	runner, err := migrations.NewRunner(migrations.Options{Schema: w.sch.Name()})
	if err != nil {
		return err
	}
	st, err := runner.Status(cctx, eng)
	if err != nil {
		return fmt.Errorf("tenure: start: reading the schema version: %w", err)
	}
	var unknown, pending []int
	for _, s := range st {
		switch {
		case s.Unknown:
			unknown = append(unknown, s.Version)
		case !s.Applied:
			pending = append(pending, s.Version)
		}
	}
	latest := migrations.Latest()
	if len(unknown) > 0 {
		return fmt.Errorf("%w: applied migration(s) %v are unknown to this release, which knows up to version %d: "+
			"a newer release migrated this database; run that release (or roll the schema back with its tenure migrate down)",
			ErrSchemaAhead, unknown, latest)
	}
	if len(pending) > 0 {
		return fmt.Errorf("%w: migration(s) %v not applied (this release needs version %d): "+
			"run `tenure migrate up` or call migrations.Up(ctx, pool) before Start", ErrSchemaBehind, pending, latest)
	}
	return nil
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
func (w *Worker) Stop(ctx context.Context) error { return w.e.Stop(ctx) }

// ReclaimExpired runs one bounded pass of the lease-expiry sweep and returns the number of
// jobs it reclaimed. The worker runs it periodically; it is exported for operators and tests.
func (w *Worker) ReclaimExpired(ctx context.Context) (int, error) { return w.e.ReclaimExpired(ctx) }

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
