// Package adapter implements the runtime contract of the long-horizon portable benchmark
// (github.com/hardbyte/postgresql-job-queue-benchmarking, CONTRIBUTING_ADAPTERS.md) on top of
// any sut.System: one long-running process configured by environment variables that writes
// JSON Lines telemetry on stdout (a descriptor record, then one record per metric every
// SAMPLE_EVERY_S, aligned to wall-clock boundaries), logs on stderr, and exits 0 within five
// seconds of SIGTERM.
package adapter

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenureq/tenure/bench/internal/hist"
	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/bench/internal/sut"
)

// Metric names, in the order they are emitted each tick.
var Metrics = []string{"claim_p50_ms", "claim_p95_ms", "claim_p99_ms", "enqueue_rate", "completion_rate", "queue_depth"}

// ClaimWindowS is the rolling window of the claim latency percentiles.
const ClaimWindowS = 30

// Config is the adapter's environment.
type Config struct {
	DatabaseURL  string
	Scenario     string // long_horizon (the contract's lifecycle mode) or migrate_only
	ProducerMode string // fixed | depth-target
	ProducerRate int    // jobs/s in fixed mode
	TargetDepth  int    // jobs in depth-target mode
	WorkerCount  int
	PayloadBytes int
	WorkMS       int
	SampleEveryS int
	// Not part of the contract; same names as the reference adapters use.
	BatchMax   int // PRODUCER_BATCH_MAX: max jobs per insert call (default 128)
	BatchMS    int // PRODUCER_BATCH_MS: fixed-mode pacing period (default 10)
	MaxConns   int // MAX_CONNECTIONS: pool size (default WORKER_COUNT/4 + 10)
	InstanceID int // BENCH_INSTANCE_ID (default 0)
}

// ConfigFromEnv reads the contract's variables, applying the contract's defaults.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var errs []error
	str := func(k, def string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return def
	}
	num := func(k string, def, min int) int {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			// tolerate "200.0"
			f, ferr := strconv.ParseFloat(v, 64)
			if ferr != nil {
				errs = append(errs, fmt.Errorf("%s=%q is not a number", k, v))
				return def
			}
			n = int(f)
		}
		if n < min {
			errs = append(errs, fmt.Errorf("%s=%d must be >= %d", k, n, min))
			return def
		}
		return n
	}
	c := Config{
		DatabaseURL:  str("DATABASE_URL", ""),
		Scenario:     str("SCENARIO", "long_horizon"),
		ProducerMode: str("PRODUCER_MODE", "fixed"),
		ProducerRate: num("PRODUCER_RATE", 800, 0),
		TargetDepth:  num("TARGET_DEPTH", 1000, 0),
		WorkerCount:  num("WORKER_COUNT", 32, 1),
		PayloadBytes: num("JOB_PAYLOAD_BYTES", 256, 0),
		WorkMS:       num("JOB_WORK_MS", 1, 0),
		SampleEveryS: num("SAMPLE_EVERY_S", 5, 1),
		BatchMax:     num("PRODUCER_BATCH_MAX", 128, 1),
		BatchMS:      num("PRODUCER_BATCH_MS", 10, 1),
		InstanceID:   num("BENCH_INSTANCE_ID", 0, 0),
	}
	c.MaxConns = num("MAX_CONNECTIONS", c.WorkerCount/4+10, 2)
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL must be set"))
	}
	switch c.ProducerMode {
	case "fixed", "depth-target":
	default:
		errs = append(errs, fmt.Errorf("PRODUCER_MODE=%q: want fixed or depth-target", c.ProducerMode))
	}
	switch c.Scenario {
	case "long_horizon", "migrate_only":
	default:
		errs = append(errs, fmt.Errorf("SCENARIO=%q: this adapter implements long_horizon (and migrate_only)", c.Scenario))
	}
	return c, errors.Join(errs...)
}

// Descriptor is the startup record.
type Descriptor struct {
	Kind          string   `json:"kind"`
	System        string   `json:"system"`
	EventTables   []string `json:"event_tables"`
	Extensions    []string `json:"extensions"`
	Version       string   `json:"version"`
	SchemaVersion string   `json:"schema_version"`
	DBName        string   `json:"db_name"`
	StartedAt     string   `json:"started_at"`
	InstanceID    int      `json:"instance_id"`
}

// Sample is one metric record.
type Sample struct {
	T           string  `json:"t"`
	System      string  `json:"system"`
	Kind        string  `json:"kind"`
	SubjectKind string  `json:"subject_kind"`
	Subject     string  `json:"subject"`
	Metric      string  `json:"metric"`
	Value       float64 `json:"value"`
	WindowS     float64 `json:"window_s"`
	InstanceID  int     `json:"instance_id"`
}

// TimeFormat is the timestamp format of t and started_at (UTC, milliseconds, Z).
const TimeFormat = "2006-01-02T15:04:05.000Z"

// Options are the parts of a run that are not environment.
type Options struct {
	System  string // sut driver name, also the "system" field
	Version string // the "version" field
	Stdout  io.Writer
	Logger  *slog.Logger
}

// emitter serialises JSON lines onto stdout.
type emitter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (e *emitter) emit(recs ...any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		e.w.Write(b)
		e.w.WriteByte('\n')
	}
	return e.w.Flush()
}

// Run migrates, writes the descriptor, and produces, works and samples until ctx is cancelled
// (SIGTERM), then stops within the shutdown budget and returns nil.
func Run(ctx context.Context, cfg Config, opts Options) error {
	log := opts.Logger
	drv, err := sut.Get(opts.System)
	if err != nil {
		return err
	}
	out := &emitter{w: bufio.NewWriter(opts.Stdout)}

	// Setup must not outlive a SIGTERM by more than the budget either.
	setupCtx, cancelSetup := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSetup()
	stopSetup := context.AfterFunc(ctx, func() {
		time.AfterFunc(3*time.Second, cancelSetup)
	})
	defer stopSetup()

	pool, err := pgutil.NewPool(setupCtx, cfg.DatabaseURL, int32(cfg.MaxConns))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := drv.Migrate(setupCtx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	schema := "unknown"
	if drv.SchemaVersion != nil {
		if v, err := drv.SchemaVersion(setupCtx, pool); err == nil {
			schema = v
		}
	}
	dbName := pgutil.DatabaseName(cfg.DatabaseURL)
	if err := out.emit(Descriptor{
		Kind: "descriptor", System: opts.System, EventTables: []string{drv.QueueTable},
		Extensions: []string{}, Version: opts.Version, SchemaVersion: schema, DBName: dbName,
		StartedAt: time.Now().UTC().Format(TimeFormat), InstanceID: cfg.InstanceID,
	}); err != nil {
		return err
	}
	log.Info("adapter: migrated, descriptor written", "system", opts.System, "schema_version", schema, "db", dbName)
	if cfg.Scenario == "migrate_only" {
		return nil
	}

	var (
		enqueued, completed atomic.Int64
		depth               atomic.Int64
		window              = hist.NewWindow(ClaimWindowS)
	)
	onStart := func(a *sut.BenchArgs) {
		if a.EnqNs > 0 {
			window.RecordDuration(time.Duration(time.Now().UnixNano() - a.EnqNs))
		}
	}
	sys, err := drv.New(setupCtx, sut.Options{
		Pool: pool, Workers: cfg.WorkerCount, Work: time.Duration(cfg.WorkMS) * time.Millisecond,
		OnStart: onStart, OnDone: func(*sut.BenchArgs) { completed.Add(1) }, Logger: log.With("system", opts.System),
	})
	if err != nil {
		return err
	}
	if err := sys.Start(setupCtx); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	if d, err := sys.Depth(setupCtx); err == nil {
		depth.Store(d)
	}

	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); produce(loopCtx, cfg, sys, &enqueued, &depth, log) }()
	go func() { defer wg.Done(); pollDepth(loopCtx, sys, &depth, log) }()
	go func() {
		defer wg.Done()
		sample(loopCtx, cfg, opts.System, out, window, &enqueued, &completed, &depth, log)
	}()

	<-ctx.Done()
	shutdownStart := time.Now()
	log.Info("adapter: SIGTERM, shutting down")
	stopLoops()
	waitTimeout(&wg, time.Second)
	_ = out.emit() // flush
	// Give running handlers what is left of a ~3.5 s budget, then let Stop hard-stop them.
	stopCtx, cancel := context.WithDeadline(context.Background(), shutdownStart.Add(2500*time.Millisecond))
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- sys.Stop(stopCtx) }()
	select {
	case err := <-stopped:
		if err != nil {
			log.Warn("adapter: stop", "err", err)
		}
	case <-time.After(time.Until(shutdownStart.Add(4 * time.Second))):
		log.Warn("adapter: workers did not stop in time; exiting anyway")
		return nil // do not block in pool.Close on connections still held
	}
	log.Info("adapter: stopped", "enqueued", enqueued.Load(), "completed", completed.Load(),
		"shutdown", time.Since(shutdownStart).Round(time.Millisecond))
	return nil
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// produce inserts jobs: in fixed mode PRODUCER_RATE jobs/s, paced by a credit that accrues
// every PRODUCER_BATCH_MS and is spent in insert calls of at most PRODUCER_BATCH_MAX jobs;
// in depth-target mode it tops the available depth up to TARGET_DEPTH.
func produce(ctx context.Context, cfg Config, sys sut.System, enqueued, depth *atomic.Int64, log *slog.Logger) {
	pad := sut.Pad(cfg.PayloadBytes)
	var seq int64
	var failures int
	insert := func(n int) {
		now := time.Now().UnixNano()
		var err error
		if n == 1 {
			err = sys.Insert(ctx, sut.BenchArgs{Pad: pad, Seq: seq, EnqNs: now})
		} else {
			args := make([]sut.BenchArgs, n)
			for i := range args {
				args[i] = sut.BenchArgs{Pad: pad, Seq: seq + int64(i), EnqNs: now}
			}
			err = sys.InsertBatch(ctx, args)
		}
		if err != nil {
			if ctx.Err() == nil {
				failures++
				if failures <= 5 || failures%1000 == 0 {
					log.Warn("adapter: insert failed", "jobs", n, "err", err, "failures", failures)
				}
				sleepCtx(ctx, 50*time.Millisecond)
			}
			return
		}
		seq += int64(n)
		enqueued.Add(int64(n))
		depth.Add(int64(n))
	}
	if cfg.ProducerMode == "depth-target" {
		for ctx.Err() == nil {
			missing := int64(cfg.TargetDepth) - depth.Load()
			if missing <= 0 {
				sleepCtx(ctx, 20*time.Millisecond)
				continue
			}
			insert(int(min(missing, int64(cfg.BatchMax))))
		}
		return
	}
	if cfg.ProducerRate <= 0 {
		<-ctx.Done()
		return
	}
	period := time.Duration(cfg.BatchMS) * time.Millisecond
	credit := 0.0
	last := time.Now()
	for ctx.Err() == nil {
		if d := period - time.Since(last); d > 0 {
			sleepCtx(ctx, d)
		}
		now := time.Now()
		credit += float64(cfg.ProducerRate) * now.Sub(last).Seconds()
		last = now
		// Never let a stall turn into an unbounded burst: at most one second of backlog.
		credit = min(credit, float64(cfg.ProducerRate))
		for credit >= 1 && ctx.Err() == nil {
			n := min(int(credit), cfg.BatchMax)
			insert(n)
			credit -= float64(n)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pollDepth refreshes the available-jobs count four times a second.
func pollDepth(ctx context.Context, sys sut.System, depth *atomic.Int64, log *slog.Logger) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			d, err := sys.Depth(qctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("adapter: depth query failed", "err", err)
				}
				continue
			}
			depth.Store(d)
		}
	}
}

// nextBoundary returns the first multiple of every (since the Unix epoch) after t.
func nextBoundary(t time.Time, every time.Duration) time.Time {
	return t.Truncate(every).Add(every)
}

// sample emits every metric at each wall-clock multiple of SAMPLE_EVERY_S.
func sample(ctx context.Context, cfg Config, system string, out *emitter, window *hist.Window,
	enqueued, completed, depth *atomic.Int64, log *slog.Logger) {
	every := time.Duration(cfg.SampleEveryS) * time.Second
	next := nextBoundary(time.Now(), every)
	lastT := time.Now()
	lastEnq, lastCmp := enqueued.Load(), completed.Load()
	for {
		sleepCtx(ctx, time.Until(next))
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		dt := now.Sub(lastT).Seconds()
		enq, cmp := enqueued.Load(), completed.Load()
		h := window.Snapshot()
		ts := next.UTC().Format(TimeFormat)
		values := []float64{
			h.Quantile(0.50) / 1000, h.Quantile(0.95) / 1000, h.Quantile(0.99) / 1000,
			float64(enq-lastEnq) / dt, float64(cmp-lastCmp) / dt, float64(max(0, depth.Load())),
		}
		windows := []float64{ClaimWindowS, ClaimWindowS, ClaimWindowS, float64(cfg.SampleEveryS), float64(cfg.SampleEveryS), 0}
		recs := make([]any, len(Metrics))
		for i, m := range Metrics {
			recs[i] = Sample{T: ts, System: system, Kind: "adapter", SubjectKind: "adapter", Subject: "",
				Metric: m, Value: values[i], WindowS: windows[i], InstanceID: cfg.InstanceID}
		}
		if err := out.emit(recs...); err != nil {
			log.Error("adapter: write samples", "err", err)
		}
		lastT, lastEnq, lastCmp = now, enq, cmp
		next = next.Add(every)
		for !next.After(time.Now()) { // fell behind by a whole period: skip, stay aligned
			next = next.Add(every)
		}
	}
}
