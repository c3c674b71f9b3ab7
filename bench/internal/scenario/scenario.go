// Package scenario runs one benchmark scenario against one queue in one fresh database and
// returns its raw measurements. The compare command runs every scenario in a child process so
// the two queues never share a heap, goroutines or a garbage collector.
package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/bench/internal/procstat"
	"github.com/tenureq/tenure/bench/internal/sut"
)

// Scenario names.
const (
	BurnDown    = "burn-down"
	Steady      = "steady"
	Latency     = "latency"
	BulkEnqueue = "bulk-enqueue"
	HeldXmin    = "held-xmin"
	FewWorkers  = "few-workers"
	Phases      = "phases"
	// PeakBurnDown and PeakSteady are burn-down and steady with each queue at its own
	// peak-throughput settings (sut.Options.Peak) under one cap on connections (Spec.ConnCap).
	PeakBurnDown = "peak-burn-down"
	PeakSteady   = "peak-steady"
)

// All lists the scenarios in report order.
var All = []string{BurnDown, Steady, PeakBurnDown, PeakSteady, Latency, BulkEnqueue, HeldXmin, FewWorkers, Phases}

// RunsWorkers says whether a scenario starts the queue's workers (bulk-enqueue only inserts).
func RunsWorkers(name string) bool { return name != BulkEnqueue }

// Spec is everything a child needs to run one scenario once.
type Spec struct {
	Scenario     string        `json:"scenario"`
	System       string        `json:"system"`
	DBURL        string        `json:"db_url"`
	Workers      int           `json:"workers"`
	MaxConns     int32         `json:"max_conns"`
	Jobs         int           `json:"jobs"`          // burn-down / bulk-enqueue total, few-workers backlog
	Duration     time.Duration `json:"duration"`      // timed scenarios; burn-down: time limit (0 = none)
	Warmup       time.Duration `json:"warmup"`        // latency: jobs committed earlier are not recorded
	Batch        int           `json:"batch"`         // bulk insert size
	Producers    int           `json:"producers"`     // steady / held-xmin producer goroutines
	BacklogCap   int           `json:"backlog_cap"`   // steady / held-xmin: max inserted-but-unfinished
	Rate         int           `json:"rate"`          // latency: offered jobs/s
	PayloadBytes int           `json:"payload_bytes"` // approximate encoded args size
	Work         time.Duration `json:"work"`          // handler sleep
	HoldXmin     bool          `json:"hold_xmin"`
	BatchAPI     string        `json:"batch_api"`
	Analyze      bool          `json:"analyze"`      // ANALYZE after pre-inserting a backlog
	StopTimeout  time.Duration `json:"stop_timeout"` // graceful stop budget after the measurement
	// Phases: the phases scenario's schedule (latency's open-loop load throughout).
	Phases []Phase `json:"phases,omitempty"`
	// Readers and ReaderHold: the active-readers disturbance (sessions, transaction length).
	Readers    int           `json:"readers,omitempty"`
	ReaderHold time.Duration `json:"reader_hold,omitempty"`
	// Peak runs the queue at its own peak-throughput settings (the peak scenarios); Workers and
	// MaxConns are then the driver's (sut.Driver.PeakPool), within ConnCap connections in all.
	// Tune overrides single peak settings of this run's system (sut.Driver.PeakKeys).
	Peak    bool              `json:"peak,omitempty"`
	ConnCap int               `json:"conn_cap,omitempty"`
	Tune    map[string]string `json:"tune,omitempty"`
	// Inserters is the number of goroutines (each on its own connection) bulk-enqueue inserts
	// from, the batches dealt out in turn; 0 or 1: one. Ceiling measures the server's own
	// insert ceiling (sut.Driver.CeilingSQL) in the same run with the same batches.
	Inserters int  `json:"inserters,omitempty"`
	Ceiling   bool `json:"ceiling,omitempty"`
	// Rounds is how many queue passes bulk-enqueue makes (0 or 1: one), each after a ceiling
	// pass when Ceiling is set, plus one last ceiling pass: the table truncated before each
	// pass. The reported rates are the passes' medians; the meter covers the first queue pass.
	Rounds int `json:"rounds,omitempty"`
	// CPUProfile, when set, is a file the run writes a Go CPU profile of its measured interval
	// to (the queue library and the bench's producers in this process).
	CPUProfile string `json:"cpu_profile,omitempty"`
}

// Phase is one interval of the phases scenario and the disturbance applied during it.
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
	Disturb  string        `json:"disturb,omitempty"` // "", DisturbIdleInTx or DisturbReaders
}

// Disturbances of a phase.
const (
	// DisturbIdleInTx: one session holds BEGIN; SELECT txid_current() for the whole phase.
	DisturbIdleInTx = "idle-in-tx"
	// DisturbReaders: Readers sessions keep REPEATABLE READ transactions of ReaderHold open,
	// scanning the queue table every 100 ms (pgutil.ActiveReaders).
	DisturbReaders = "active-readers"
)

// PhaseMetric names a per-phase metric: "<phase>/<metric>".
func PhaseMetric(phase, metric string) string { return phase + "/" + metric }

// Per-phase metric keys beyond the latency ones.
const (
	MDepthMax   = "depth_max"   // largest claimable backlog sampled (every 250 ms) in the phase
	MBacklogEnd = "backlog_end" // jobs inserted but not started when the phase ended
)

// Result is one run's raw measurements.
type Result struct {
	Scenario string             `json:"scenario"`
	System   string             `json:"system"`
	BatchAPI string             `json:"batch_api"`
	Metrics  map[string]float64 `json:"metrics"`
	// Jobs is the number of jobs the CPU figures are divided by (completed, or inserted for
	// bulk-enqueue).
	Jobs       int64   `json:"jobs"`
	Elapsed    float64 `json:"elapsed_s"`
	BenchCPU   float64 `json:"bench_cpu_s"`
	PGCPU      float64 `json:"pg_cpu_s"`     // attributed to this run's database
	PGCPUAll   float64 `json:"pg_cpu_all_s"` // every postgres process, for reference
	PGCPUValid bool    `json:"pg_cpu_valid"`
	// ForeignCPU is the CPU that processes other than this one and the PostgreSQL server used
	// on the machine during the interval (interference from whatever else was running), and
	// MachineCPU the machine's capacity over the interval (elapsed × CPUs).
	ForeignCPU float64 `json:"foreign_cpu_s"`
	MachineCPU float64 `json:"machine_cpu_s"`
	// WAL is what the server wrote to its WAL over the interval (all databases; the systems
	// run one at a time) and how many checkpoints started in it; WALValid when it was read.
	WAL      pgutil.WAL        `json:"wal"`
	WALValid bool              `json:"wal_valid"`
	Settings map[string]string `json:"settings"`
	Notes    []string          `json:"notes,omitempty"`
	// Statements: the run's top statements by execution time over the measured interval, from
	// pg_stat_statements (when the server loads it: the benchmark's own server does).
	Statements []pgutil.Statement `json:"statements,omitempty"`
}

// Metric keys.
const (
	MJobsPerS      = "jobs_per_s"
	MInsertedPerS  = "inserted_per_s"
	MCompletedPerS = "completed_per_s"
	MP50           = "p50_ms"
	MP95           = "p95_ms"
	MP99           = "p99_ms"
	MMax           = "max_ms"
	MDeadTuples    = "dead_tuples"
	MDeadPer1k     = "dead_tuples_per_1k"
	MLatencyN      = "latency_samples"
	// MConnsMax is the largest number of connections the run's process held at once (sampled
	// every 100 ms from pg_stat_activity over the measured interval; peak scenarios).
	MConnsMax = "conns_max"
	// MCeilingPerS is the server's own insert ceiling (bulk-enqueue with Ceiling): rows/s of
	// INSERT ... SELECT FROM generate_series into the same table, the better of one pass before
	// and one after the queue's inserts; MOfCeiling is the queue's throughput as % of it.
	MCeilingPerS = "ceiling_per_s"
	MOfCeiling   = "of_ceiling_pct"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "    "+format+"\n", args...)
}

// Run executes spec. The database must exist and be empty; Run migrates it. publish is called
// with the result as soon as the measurement is complete, before the queue's workers are
// stopped, so that a failure while shutting down cannot lose a finished measurement.
func Run(ctx context.Context, spec Spec, publish func(*Result)) error {
	drv, err := sut.Get(spec.System)
	if err != nil {
		return err
	}
	if spec.Peak {
		if err := sut.CheckTune(drv, spec.Tune); err != nil {
			return err
		}
		if drv.PeakPool == nil || spec.ConnCap <= 0 {
			return fmt.Errorf("%s: no peak settings, or no connection cap", spec.System)
		}
		if spec.MaxConns, err = drv.PeakPool(spec.ConnCap, spec.Tune); err != nil {
			return err
		}
	} else if len(spec.Tune) > 0 {
		return fmt.Errorf("tune applies only to the peak scenarios")
	}
	pool, err := pgutil.NewPool(ctx, spec.DBURL, spec.MaxConns)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	poolClosed := false
	closePool := func() {
		if !poolClosed {
			poolClosed = true
			pool.Close()
		}
	}
	defer closePool()
	if err := drv.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("%s migrate: %w", spec.System, err)
	}
	r := &runner{spec: spec, drv: drv, pool: pool, closePool: closePool, publishFn: publish,
		res: &Result{Scenario: spec.Scenario, System: spec.System, BatchAPI: spec.BatchAPI, Metrics: map[string]float64{}}}
	switch spec.Scenario {
	case BurnDown, PeakBurnDown:
		err = r.burnDown(ctx)
	case Steady, HeldXmin, PeakSteady:
		err = r.steady(ctx)
	case Latency:
		err = r.latency(ctx)
	case BulkEnqueue:
		err = r.bulk(ctx)
	case FewWorkers:
		err = r.fewWorkers(ctx)
	case Phases:
		err = r.phases(ctx)
	default:
		err = fmt.Errorf("unknown scenario %q", spec.Scenario)
	}
	if err != nil {
		return err
	}
	r.publish()
	return nil
}

type runner struct {
	spec      Spec
	drv       *sut.Driver
	pool      *pgxpool.Pool
	closePool func()
	res       *Result
	pad       string
	publishFn func(*Result)
	published bool
	profile   *os.File // the CPU profile being written, if any
}

// publish hands the result over once; call it when the measurement is complete.
func (r *runner) publish() {
	if !r.published && r.publishFn != nil {
		r.published = true
		r.publishFn(r.res)
	}
}

func (r *runner) newSystem(ctx context.Context, workers int, onStart, onDone sut.Handler) (sut.System, error) {
	r.pad = sut.Pad(r.spec.PayloadBytes)
	sys, err := r.drv.New(ctx, sut.Options{
		Pool: r.pool, Workers: workers, OnStart: onStart, OnDone: onDone,
		Work: r.spec.Work, BatchAPI: r.spec.BatchAPI, Peak: r.spec.Peak, Tune: r.spec.Tune,
	})
	if err != nil {
		return nil, err
	}
	r.res.Settings = sys.Settings()
	if r.res.BatchAPI == "" {
		r.res.BatchAPI = r.drv.BatchAPIs[0]
	}
	return sys, nil
}

// meter measures wall time, this process's CPU and the server's CPU over an interval.
type meter struct {
	stmts []pgutil.Statement
	t0    time.Time
	cpu0  time.Duration
	busy0 time.Duration
	srv   *pgutil.ServerCPU
	conns *pgutil.ConnSampler // with a connection cap
	wal0  pgutil.WAL
	walOK bool
}

func (r *runner) startMeter(ctx context.Context) (*meter, error) {
	srv, err := pgutil.StartServerCPU(ctx, r.spec.DBURL)
	if err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	}
	stmts := pgutil.Statements(ctx, r.spec.DBURL, 1000)
	var conns *pgutil.ConnSampler
	if r.spec.ConnCap > 0 {
		if conns, err = pgutil.StartConnSampler(ctx, r.spec.DBURL, 100*time.Millisecond); err != nil {
			return nil, fmt.Errorf("connection sampler: %w", err)
		}
	}
	if r.spec.CPUProfile != "" {
		f, err := os.Create(r.spec.CPUProfile)
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		r.profile = f
	}
	srv.Reset()
	wal, walErr := pgutil.ReadWAL(ctx, srv.Conn())
	busy, _ := procstat.MachineBusy()
	return &meter{stmts: stmts, t0: time.Now(), cpu0: procstat.SelfCPU(), busy0: busy, srv: srv, conns: conns,
		wal0: wal, walOK: walErr == nil}, nil
}

// stop ends the interval; jobs is the CPU denominator. Call before closing the pool.
func (r *runner) stopMeter(ctx context.Context, m *meter, jobs int64) time.Duration {
	elapsed := time.Since(m.t0)
	bench := procstat.SelfCPU() - m.cpu0
	if r.profile != nil {
		pprof.StopCPUProfile()
		if err := r.profile.Close(); err != nil {
			r.note("cpu profile: %v", err)
		}
		r.profile = nil
	}
	busy, _ := procstat.MachineBusy()
	if m.walOK {
		if wal, err := pgutil.ReadWAL(ctx, m.srv.Conn()); err == nil {
			r.res.WAL, r.res.WALValid = wal.Sub(m.wal0), true
		}
	}
	attributed, all, err := m.srv.Stop(ctx)
	m.srv.Close(ctx)
	if m.conns != nil {
		n := m.conns.Stop()
		r.res.Metrics[MConnsMax] = float64(n)
		if n > int64(r.spec.ConnCap) {
			r.note("held %d connections at once, above the cap of %d", n, r.spec.ConnCap)
		}
	}
	if m.stmts != nil {
		r.res.Statements = pgutil.StatementsSince(m.stmts, pgutil.Statements(ctx, r.spec.DBURL, 1000), 8)
	}
	r.res.Elapsed = elapsed.Seconds()
	r.res.BenchCPU = bench.Seconds()
	r.res.Jobs = jobs
	if err != nil || !m.srv.OK() {
		r.note("postgres CPU not measured: /proc not readable or server not local (%v)", err)
	} else {
		r.res.PGCPU, r.res.PGCPUAll, r.res.PGCPUValid = attributed.Seconds(), all.Seconds(), true
	}
	if m.busy0 > 0 && busy > 0 {
		r.res.ForeignCPU = max(0, (busy - m.busy0 - bench - all).Seconds())
		r.res.MachineCPU = elapsed.Seconds() * float64(runtime.NumCPU())
	}
	return elapsed
}

func (r *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Notes = append(r.res.Notes, msg)
	logf("note: %s", msg)
}

// preinsert bulk-inserts n jobs (not measured), then optionally ANALYZEs.
func (r *runner) preinsert(ctx context.Context, sys sut.System, n int) error {
	batch := max(1, r.spec.Batch)
	t0 := time.Now()
	args := make([]sut.BenchArgs, 0, batch)
	for i := 0; i < n; i += batch {
		args = args[:0]
		for j := i; j < min(n, i+batch); j++ {
			args = append(args, sut.BenchArgs{Pad: r.pad, Seq: int64(j)})
		}
		if err := sys.InsertBatch(ctx, args); err != nil {
			return fmt.Errorf("pre-insert: %w", err)
		}
	}
	logf("pre-inserted %d jobs in %s", n, time.Since(t0).Round(time.Millisecond))
	if r.spec.Analyze {
		if _, err := r.pool.Exec(ctx, "ANALYZE"); err != nil {
			return fmt.Errorf("analyze: %w", err)
		}
	}
	return nil
}

func (r *runner) stopSystem(sys sut.System) {
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(r.spec.StopTimeout, 30*time.Second))
	defer cancel()
	if err := sys.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		logf("stop: %v", err)
	}
}

// burnDown: pre-insert Jobs, start the workers, time until every job is finished in the
// database.
func (r *runner) burnDown(ctx context.Context) error {
	var done atomic.Int64
	sys, err := r.newSystem(ctx, r.spec.Workers, nil, func(*sut.BenchArgs) { done.Add(1) })
	if err != nil {
		return err
	}
	n := r.spec.Jobs
	if err := r.preinsert(ctx, sys, n); err != nil {
		return err
	}
	m, err := r.startMeter(ctx)
	if err != nil {
		return err
	}
	if err := sys.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer r.stopSystem(sys)
	// Wait for every handler to have run (cheap, in-process), then for the database to show
	// every job finished (completions may be written asynchronously after the handler returns).
	// A run that exceeds the time limit reports handled jobs / elapsed instead.
	limit := time.Time{}
	if r.spec.Duration > 0 {
		limit = time.Now().Add(r.spec.Duration)
	}
	last, lastProgress := int64(-1), time.Now()
	nextLog := time.Now().Add(5 * time.Second)
	for done.Load() < int64(n) {
		time.Sleep(2 * time.Millisecond)
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
		if d := done.Load(); d != last {
			last, lastProgress = d, time.Now()
		} else if time.Since(lastProgress) > 60*time.Second {
			return fmt.Errorf("burn-down stalled at %d/%d jobs", d, n)
		}
		if time.Now().After(nextLog) {
			logf("%d/%d handled", done.Load(), n)
			nextLog = time.Now().Add(5 * time.Second)
		}
		if !limit.IsZero() && time.Now().After(limit) {
			handled := done.Load()
			elapsed := r.stopMeter(ctx, m, handled)
			r.res.Metrics[MJobsPerS] = float64(handled) / elapsed.Seconds()
			r.note("did not finish %d jobs within the %s limit: throughput = %d handled / %.1fs",
				n, r.spec.Duration, handled, elapsed.Seconds())
			r.publish()
			return nil
		}
	}
	for {
		left, err := sys.Unfinished(ctx)
		if err != nil {
			return fmt.Errorf("count unfinished: %w", err)
		}
		if left == 0 {
			break
		}
		if !limit.IsZero() && time.Now().After(limit) {
			finished := int64(n) - left
			elapsed := r.stopMeter(ctx, m, finished)
			r.res.Metrics[MJobsPerS] = float64(finished) / elapsed.Seconds()
			r.note("every handler ran but %d of %d jobs were not finished in the database within the %s limit: throughput = %d finished / %.1fs",
				left, n, r.spec.Duration, finished, elapsed.Seconds())
			r.publish()
			return nil
		}
		if time.Since(lastProgress) > 60*time.Second && limit.IsZero() {
			return fmt.Errorf("burn-down: %d jobs still unfinished 60s after the last handler ran", left)
		}
		time.Sleep(5 * time.Millisecond)
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
	}
	elapsed := r.stopMeter(ctx, m, int64(n))
	r.res.Metrics[MJobsPerS] = float64(n) / elapsed.Seconds()
	r.publish()
	return nil
}

// steady runs Producers goroutines inserting Batch-sized batches while the workers work, for
// Duration, keeping at most BacklogCap jobs inserted but unfinished (so a slow consumer turns
// into a lower insert rate, not unbounded memory). With HoldXmin a separate connection keeps a
// transaction with an xid open for the whole run.
func (r *runner) steady(ctx context.Context) error {
	var done, inserted, seqGen atomic.Int64
	tr := newPickupTracker(0)
	sys, err := r.newSystem(ctx, r.spec.Workers,
		func(a *sut.BenchArgs) { tr.started(a.Seq) },
		func(*sut.BenchArgs) { done.Add(1) })
	if err != nil {
		return err
	}
	if r.spec.HoldXmin {
		release, err := pgutil.HoldXmin(ctx, r.spec.DBURL)
		if err != nil {
			return fmt.Errorf("hold xmin: %w", err)
		}
		defer release()
		logf("holding a transaction open (BEGIN; SELECT txid_current())")
	}
	if err := sys.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			r.stopSystem(sys)
		}
	}()
	m, err := r.startMeter(ctx)
	if err != nil {
		return err
	}
	tr.startClock(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var insertErrs atomic.Int64
	batch, backlogCap := max(1, r.spec.Batch), int64(max(1, r.spec.BacklogCap))
	for range max(1, r.spec.Producers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := make([]sut.BenchArgs, batch)
			seqs := make([]int64, batch)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if inserted.Load()-done.Load() >= backlogCap {
					time.Sleep(time.Millisecond)
					continue
				}
				first := seqGen.Add(int64(batch)) - int64(batch)
				for i := range args {
					seqs[i] = first + int64(i)
					args[i] = sut.BenchArgs{Pad: r.pad, Seq: seqs[i]}
				}
				if err := sys.InsertBatch(ctx, args); err != nil {
					if insertErrs.Add(1) <= 3 {
						logf("insert: %v", err)
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				tr.committed(seqs)
				inserted.Add(int64(batch))
			}
		}()
	}
	progress := time.NewTicker(5 * time.Second)
	deadline := time.NewTimer(r.spec.Duration)
loop:
	for {
		select {
		case <-deadline.C:
			break loop
		case <-ctx.Done():
			close(stop)
			wg.Wait()
			return fmt.Errorf("interrupted: %w", ctx.Err())
		case <-progress.C:
			logf("inserted %d, completed %d", inserted.Load(), done.Load())
		}
	}
	progress.Stop()
	close(stop)
	wg.Wait()
	ins, nDone := inserted.Load(), done.Load()
	elapsed := r.stopMeter(ctx, m, nDone)
	r.stopSystem(sys)
	stopped = true
	r.closePool()
	h := tr.snapshot()
	r.res.Metrics[MInsertedPerS] = float64(ins) / elapsed.Seconds()
	r.res.Metrics[MCompletedPerS] = float64(nDone) / elapsed.Seconds()
	r.res.Metrics[MP50] = h.Quantile(0.50) / 1000
	r.res.Metrics[MP95] = h.Quantile(0.95) / 1000
	r.res.Metrics[MP99] = h.Quantile(0.99) / 1000
	r.res.Metrics[MMax] = float64(h.Max()) / 1000
	r.res.Metrics[MLatencyN] = float64(h.Count())
	if n := insertErrs.Load(); n > 0 {
		r.note("%d insert batches failed", n)
	}
	dead, err := pgutil.DeadTuples(ctx, r.spec.DBURL, r.drv.QueueTable)
	if err != nil {
		return fmt.Errorf("dead tuples: %w", err)
	}
	r.res.Metrics[MDeadTuples] = float64(dead)
	if nDone > 0 {
		r.res.Metrics[MDeadPer1k] = float64(dead) / (float64(nDone) / 1000)
	}
	return nil
}

// latency offers Rate jobs/s, each inserted alone in its own transaction, on a fixed schedule
// (open loop: a slow insert does not delay the next one's scheduled time), for Duration, and
// records enqueue-commit → handler-start of every job committed after Warmup.
func (r *runner) latency(ctx context.Context) error {
	var done, inserted atomic.Int64
	tr := newPickupTracker(0)
	sys, err := r.newSystem(ctx, r.spec.Workers,
		func(a *sut.BenchArgs) { tr.started(a.Seq) },
		func(*sut.BenchArgs) { done.Add(1) })
	if err != nil {
		return err
	}
	if err := sys.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer r.stopSystem(sys)
	time.Sleep(500 * time.Millisecond) // let both queues finish starting up
	m, err := r.startMeter(ctx)
	if err != nil {
		return err
	}
	tr.startClock(r.spec.Warmup)
	rate := max(1, r.spec.Rate)
	interval := time.Second / time.Duration(rate)
	total := int(r.spec.Duration / interval)
	seqCh, wg, insertErrs := r.inserters(ctx, sys, tr, &inserted, rate)
	start := time.Now()
	var late int
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		if ctx.Err() != nil {
			close(seqCh)
			wg.Wait()
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		} else if d < -10*time.Millisecond {
			late++
		}
		seqCh <- int64(i)
		if i > 0 && i%(rate*5) == 0 {
			logf("offered %d, completed %d", i, done.Load())
		}
	}
	close(seqCh)
	wg.Wait()
	// Let the last jobs start (bounded wait), then stop the clock.
	deadline := time.Now().Add(5 * time.Second)
	for done.Load() < inserted.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	nDone := done.Load()
	elapsed := r.stopMeter(ctx, m, nDone)
	h := tr.snapshot()
	r.res.Metrics[MP50] = h.Quantile(0.50) / 1000
	r.res.Metrics[MP95] = h.Quantile(0.95) / 1000
	r.res.Metrics[MP99] = h.Quantile(0.99) / 1000
	r.res.Metrics[MMax] = float64(h.Max()) / 1000
	r.res.Metrics[MLatencyN] = float64(h.Count())
	r.res.Metrics[MInsertedPerS] = float64(inserted.Load()) / elapsed.Seconds()
	r.res.Metrics[MCompletedPerS] = float64(nDone) / elapsed.Seconds()
	if late > 0 {
		r.note("%d of %d inserts were dispatched more than 10ms late", late, total)
	}
	if n := insertErrs.Load(); n > 0 {
		r.note("%d inserts failed", n)
	}
	if nDone < inserted.Load() {
		r.note("%d jobs had not started 5s after the last insert", inserted.Load()-nDone)
	}
	r.publish()
	return nil
}

// bulk inserts Jobs in batches of Batch from Inserters goroutines (default one), no workers
// running, Rounds times. With Ceiling it also measures, in the same database, the server's own
// insert ceiling for the same table and indexes: the same batches as server-side INSERT ...
// SELECT statements (sut.Driver.CeilingSQL), a pass before each queue pass and one after the
// last, so every queue pass sits between two ceiling passes (a checkpoint or autovacuum falls
// into either kind alike). The table is truncated before each pass. Jobs/s and the ceiling are
// the medians of their passes (one pass of 1–2 s differed from the next by 70 % in a published
// run); the meter (statements, CPU, WAL) covers the first queue pass.
func (r *runner) bulk(ctx context.Context) error {
	sys, err := r.newSystem(ctx, 0, nil, nil)
	if err != nil {
		return err
	}
	n, batch := r.spec.Jobs, max(1, r.spec.Batch)
	// Build every batch before the clock starts so only the inserts are timed.
	batches := make([][]sut.BenchArgs, 0, (n+batch-1)/batch)
	for i := 0; i < n; i += batch {
		b := make([]sut.BenchArgs, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			b = append(b, sut.BenchArgs{Pad: r.pad, Seq: int64(j)})
		}
		batches = append(batches, b)
	}
	ceiling := r.spec.Ceiling && r.drv.CeilingSQL != ""
	if r.spec.Ceiling && !ceiling {
		r.note("no ceiling statement for %s", r.spec.System)
	}
	var ceilings, rates []float64
	ceilingPass := func() error {
		v, err := r.ceilingPass(ctx, batches)
		if err != nil {
			return err
		}
		ceilings = append(ceilings, v)
		return r.truncate(ctx)
	}
	for k := range max(1, r.spec.Rounds) {
		if ceiling {
			if err := ceilingPass(); err != nil {
				return err
			}
		}
		var m *meter
		if k == 0 {
			if m, err = r.startMeter(ctx); err != nil {
				return err
			}
		}
		t0 := time.Now()
		err = r.inParallel(ctx, len(batches), func(ctx context.Context, i int) error {
			return sys.InsertBatch(ctx, batches[i])
		})
		if err != nil {
			return fmt.Errorf("insert batch: %w", err)
		}
		elapsed := time.Since(t0)
		if m != nil {
			elapsed = r.stopMeter(ctx, m, int64(n))
		}
		if err := r.checkCount(ctx, n); err != nil {
			return err
		}
		rates = append(rates, float64(n)/elapsed.Seconds())
		if err := r.truncate(ctx); err != nil {
			return err
		}
	}
	r.res.Metrics[MJobsPerS] = median(rates)
	if len(rates) > 1 {
		logf("%s: %s jobs/s per pass, median %.0f", r.spec.System, fmtRates(rates), median(rates))
	}
	if ceiling {
		if err := ceilingPass(); err != nil {
			return err
		}
		best := median(ceilings)
		r.res.Metrics[MCeilingPerS] = best
		r.res.Metrics[MOfCeiling] = 100 * r.res.Metrics[MJobsPerS] / best
		logf("server ceiling %s rows/s per pass, median %.0f; %s %.0f jobs/s = %.0f%% of it",
			fmtRates(ceilings), best, r.spec.System, r.res.Metrics[MJobsPerS], r.res.Metrics[MOfCeiling])
	}
	return nil
}

// median of a non-empty list (the mean of the middle two for an even count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtRates(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(out, ", ")
}

// inParallel calls f for 0..n-1 from Inserters goroutines (at least one), index i on goroutine
// i mod Inserters, and returns the first error.
func (r *runner) inParallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	k := max(1, r.spec.Inserters)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, k)
	var wg sync.WaitGroup
	for g := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += k {
				if err := f(ctx, i); err != nil {
					errs[g] = err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ceilingPass inserts the batches' rows with the driver's server-side INSERT ... SELECT, one
// autocommitted statement per batch, from Inserters connections, checks the row count and
// returns rows/s.
func (r *runner) ceilingPass(ctx context.Context, batches [][]sut.BenchArgs) (float64, error) {
	t0 := time.Now()
	err := r.inParallel(ctx, len(batches), func(ctx context.Context, i int) error {
		b := batches[i]
		_, err := r.pool.Exec(ctx, r.drv.CeilingSQL, r.pad, b[0].Seq, b[len(b)-1].Seq)
		return err
	})
	elapsed := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("ceiling: %w", err)
	}
	if err := r.checkCount(ctx, r.spec.Jobs); err != nil {
		return 0, fmt.Errorf("ceiling: %w", err)
	}
	return float64(r.spec.Jobs) / elapsed.Seconds(), nil
}

func (r *runner) truncate(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, "TRUNCATE "+r.drv.QueueTable+" CASCADE")
	return err
}

func (r *runner) checkCount(ctx context.Context, n int) error {
	var count int64
	if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM "+r.drv.QueueTable).Scan(&count); err != nil {
		return fmt.Errorf("count: %w", err)
	}
	if count != int64(n) {
		return fmt.Errorf("bulk-enqueue: %d rows in %s, want %d", count, r.drv.QueueTable, n)
	}
	return nil
}

// fewWorkers: a deep pre-inserted backlog, Workers handlers that each sleep Work, for Duration.
func (r *runner) fewWorkers(ctx context.Context) error {
	var done atomic.Int64
	sys, err := r.newSystem(ctx, r.spec.Workers, nil, func(*sut.BenchArgs) { done.Add(1) })
	if err != nil {
		return err
	}
	if err := r.preinsert(ctx, sys, r.spec.Jobs); err != nil {
		return err
	}
	m, err := r.startMeter(ctx)
	if err != nil {
		return err
	}
	if err := sys.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer r.stopSystem(sys)
	select {
	case <-time.After(r.spec.Duration):
	case <-ctx.Done():
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	nDone := done.Load()
	elapsed := r.stopMeter(ctx, m, nDone)
	r.res.Metrics[MCompletedPerS] = float64(nDone) / elapsed.Seconds()
	if nDone >= int64(r.spec.Jobs) {
		r.note("backlog of %d ran out before the end of the run: throughput is a lower bound", r.spec.Jobs)
	}
	r.publish()
	return nil
}

// phases offers Rate jobs/s (each inserted alone, open loop, as in latency) through a schedule
// of phases, each with its own disturbance of the database (the phase schedule of the public
// postgresql-job-queue-benchmarking harness: clean, idle-in-tx, active-readers, recovery), and
// reports pickup latency, throughput and backlog per phase: a queue that falls behind under a
// disturbance shows it as a growing backlog and as latency in the phases after it.
func (r *runner) phases(ctx context.Context) error {
	var done, inserted atomic.Int64
	tr := newPickupTracker(0)
	tr.usePhases(len(r.spec.Phases))
	sys, err := r.newSystem(ctx, r.spec.Workers,
		func(a *sut.BenchArgs) { tr.started(a.Seq) },
		func(*sut.BenchArgs) { done.Add(1) })
	if err != nil {
		return err
	}
	if err := sys.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer r.stopSystem(sys)
	time.Sleep(500 * time.Millisecond)
	m, err := r.startMeter(ctx)
	if err != nil {
		return err
	}
	tr.startClock(0)
	seqCh, wg, insertErrs := r.inserters(ctx, sys, tr, &inserted, 4096)
	// Depth sampler: the largest claimable backlog per phase.
	var phaseIdx atomic.Int64
	depthMax := make([]atomic.Int64, len(r.spec.Phases))
	sampleStop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampleStop:
				return
			case <-t.C:
			}
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			d, err := sys.Depth(dctx)
			cancel()
			if err != nil {
				continue
			}
			i := phaseIdx.Load()
			if d > depthMax[i].Load() {
				depthMax[i].Store(d)
			}
		}
	}()
	rate := max(1, r.spec.Rate)
	interval := time.Second / time.Duration(rate)
	var seq int64
	var late int
	for i, ph := range r.spec.Phases {
		var release func()
		switch ph.Disturb {
		case DisturbIdleInTx:
			release, err = pgutil.HoldXmin(ctx, r.spec.DBURL)
		case DisturbReaders:
			release, err = pgutil.ActiveReaders(ctx, r.spec.DBURL, r.drv.QueueTable, max(1, r.spec.Readers),
				cmp.Or(r.spec.ReaderHold, 10*time.Second))
		}
		if err != nil {
			close(seqCh)
			wg.Wait()
			return fmt.Errorf("phase %s: %w", ph.Name, err)
		}
		phaseIdx.Store(int64(i))
		tr.beginPhase(i)
		done0 := done.Load()
		logf("phase %s (%s, %s)", ph.Name, cmp.Or(ph.Disturb, "no disturbance"), ph.Duration)
		start := time.Now()
		total := int(ph.Duration / interval)
		for k := range total {
			if ctx.Err() != nil {
				break
			}
			if d := time.Until(start.Add(time.Duration(k) * interval)); d > 0 {
				time.Sleep(d)
			} else if d < -10*time.Millisecond {
				late++
			}
			seqCh <- seq
			seq++
		}
		if d := time.Until(start.Add(ph.Duration)); d > 0 {
			time.Sleep(d)
		}
		elapsed := time.Since(start)
		if release != nil {
			release()
		}
		nDone := done.Load() - done0
		r.res.Metrics[PhaseMetric(ph.Name, MCompletedPerS)] = float64(nDone) / elapsed.Seconds()
		r.res.Metrics[PhaseMetric(ph.Name, MBacklogEnd)] = float64(max(0, inserted.Load()-done.Load()))
		logf("  completed %.0f/s, backlog %d", float64(nDone)/elapsed.Seconds(), inserted.Load()-done.Load())
		if ctx.Err() != nil {
			close(seqCh)
			wg.Wait()
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
	}
	close(seqCh)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for done.Load() < inserted.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(sampleStop)
	sampler.Wait()
	nDone := done.Load()
	elapsed := r.stopMeter(ctx, m, nDone)
	for i, ph := range r.spec.Phases {
		h := tr.phaseSnapshot(i)
		r.res.Metrics[PhaseMetric(ph.Name, MP50)] = h.Quantile(0.50) / 1000
		r.res.Metrics[PhaseMetric(ph.Name, MP95)] = h.Quantile(0.95) / 1000
		r.res.Metrics[PhaseMetric(ph.Name, MP99)] = h.Quantile(0.99) / 1000
		r.res.Metrics[PhaseMetric(ph.Name, MDepthMax)] = float64(depthMax[i].Load())
	}
	h := tr.snapshot()
	r.res.Metrics[MP50] = h.Quantile(0.50) / 1000
	r.res.Metrics[MP99] = h.Quantile(0.99) / 1000
	r.res.Metrics[MLatencyN] = float64(h.Count())
	r.res.Metrics[MCompletedPerS] = float64(nDone) / elapsed.Seconds()
	if late > 0 {
		r.note("%d of %d inserts were dispatched more than 10ms late", late, seq)
	}
	if n := insertErrs.Load(); n > 0 {
		r.note("%d inserts failed", n)
	}
	if nDone < inserted.Load() {
		r.note("%d jobs had not started 10s after the last insert", inserted.Load()-nDone)
	}
	r.publish()
	return nil
}

// inserters starts the open-loop producers of latency and phases: 8 goroutines (enough that
// one slow commit never delays the schedule) inserting each sequence number sent on the
// returned channel alone, in its own transaction, and reporting the commit to tr. Close the
// channel and wait on the group to stop them; the counter holds the failed inserts.
func (r *runner) inserters(ctx context.Context, sys sut.System, tr *pickupTracker, inserted *atomic.Int64, buffer int) (chan<- int64, *sync.WaitGroup, *atomic.Int64) {
	seqCh := make(chan int64, buffer)
	var wg sync.WaitGroup
	var insertErrs atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := make([]int64, 1)
			for s := range seqCh {
				if err := sys.Insert(ctx, sut.BenchArgs{Pad: r.pad, Seq: s}); err != nil {
					if insertErrs.Add(1) <= 3 {
						logf("insert: %v", err)
					}
					continue
				}
				seq[0] = s
				tr.committed(seq)
				inserted.Add(1)
			}
		}()
	}
	return seqCh, &wg, &insertErrs
}
