// Command compare benchmarks Tenure against River on the same PostgreSQL server.
//
// Every run gets its own freshly created database (migrated with the queue's own migrator)
// and its own child process; runs alternate between the systems within each repetition
// (tenure, tenure-async, river, river-default by default); the report gives the median of each
// metric and the Tenure/River ratio, oriented so that > 1 means Tenure is better, for every
// pair of a Tenure and a River variant. See bench/README.md.
//
//	go run ./cmd/compare                       # everything, 3 repetitions
//	BENCH_QUICK=1 go run ./cmd/compare         # shortened, 1 repetition (< 3 minutes)
//	go run ./cmd/compare -scenarios latency -reps 5
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/bench/internal/scenario"
	"github.com/tenureq/tenure/bench/internal/sut"
	"github.com/tenureq/tenure/bench/internal/sut/riversut"
	"github.com/tenureq/tenure/bench/internal/sut/tenuresut"
	"github.com/tenureq/tenure/internal/pgserver"
)

func main() {
	child := flag.String("child", "", "internal: run one scenario described by this JSON spec and print the result")
	cfg := parseFlags()
	if *child != "" {
		os.Exit(runChild(*child))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := runCompare(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// config is the parent's configuration.
type config struct {
	quick     bool
	reps      int
	scenarios []string
	systems   []string
	// systemsDefault is set when -systems was not given: systems then run only in the
	// scenarios defaultOnlyIn allows.
	systemsDefault bool
	workers        int
	payload        int
	adminURL       string
	outDir         string
	analyze        bool
	keepDBs        bool
	phaseDur       time.Duration // phases: every phase this long (0 = the schedule's own)
	together       bool          // run the sides of each repetition at the same time
	// server: "own" starts a production-like cluster for the comparison (stock settings,
	// autovacuum on, pg_stat_statements); "url" uses the server of adminURL.
	server string
	// connCap caps every connection a run's process opens in the peak scenarios.
	connCap int
	// tune overrides peak settings per system (-tune), for sweeps.
	tune map[string]map[string]string
	// inserters: bulk-enqueue's inserting goroutines (each its own connection).
	inserters int
	// ceiling: bulk-enqueue also measures the server's own insert ceiling.
	ceiling bool
	// jobs and duration override the sizes of burn-down, peak-burn-down and bulk-enqueue (jobs)
	// and of steady, peak-steady and held-xmin (duration), for sweeps; 0 = the mode's own.
	jobs     int
	duration time.Duration
	// profileDir: every run writes a CPU profile of its measured interval there.
	profileDir string
	// pgSettings: extra settings of the server -server own starts (-pg-set, diagnosis).
	pgSettings []string
}

// defaultConnCap is the peak scenarios' cap on the connections of one run's process.
const defaultConnCap = 20

// defaultSystems run when -systems is not given, in this order within each repetition.
var defaultSystems = []string{tenuresut.Name, tenuresut.NameAsync, riversut.Name, riversut.NameDefault}

// defaultOnlyIn limits a default system to some scenarios: River with its default fetch
// settings is compared where its fetch delays are the question (pickup latency, a few workers
// on a deep backlog). Named explicitly with -systems, it runs in every scenario with workers.
var defaultOnlyIn = map[string][]string{
	riversut.NameDefault: {scenario.Latency, scenario.FewWorkers},
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	if v := os.Getenv(key); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		fmt.Fprintf(os.Stderr, "compare: ignoring %s=%q (not an integer)\n", key, v)
	}
	return def
}

func envBool(key string) bool {
	switch strings.ToLower(os.Getenv(key)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func parseFlags() config {
	var c config
	var scen, systems string
	flag.BoolVar(&c.quick, "quick", envBool("BENCH_QUICK"), "shortened run: 1 repetition, 20k jobs, 3 s timed runs, 4 s phases (env BENCH_QUICK=1)")
	flag.IntVar(&c.reps, "reps", envInt("BENCH_REPS", 0), "repetitions per scenario (env BENCH_REPS; default 3, or 1 with -quick)")
	flag.StringVar(&scen, "scenarios", envOr("BENCH_SCENARIOS", "all"), "comma-separated scenarios or 'all' (env BENCH_SCENARIOS): "+strings.Join(scenario.All, ", "))
	flag.StringVar(&systems, "systems", envOr("BENCH_SYSTEMS", ""), "comma-separated systems to run (env BENCH_SYSTEMS): "+
		strings.Join(sut.Names(), ", ")+"; default "+strings.Join(defaultSystems, ",")+
		" with "+riversut.NameDefault+" only in "+strings.Join(defaultOnlyIn[riversut.NameDefault], " and "))
	flag.IntVar(&c.workers, "workers", envInt("BENCH_WORKERS", 100), "worker count for burn-down, steady and held-xmin (env BENCH_WORKERS)")
	flag.IntVar(&c.payload, "payload", envInt("BENCH_PAYLOAD_BYTES", 256), "approximate encoded job args size in bytes (env BENCH_PAYLOAD_BYTES)")
	flag.StringVar(&c.adminURL, "admin-url", envOr("BENCH_ADMIN_URL", pgutil.DefaultAdminURL), "with -server url: a database on the server, used to create and drop the per-run databases (env BENCH_ADMIN_URL)")
	flag.StringVar(&c.server, "server", envOr("BENCH_SERVER", ""), "own: start a production-like PostgreSQL for the run (the distribution's stock settings, autovacuum on, pg_stat_statements); url: use the server of -admin-url (env BENCH_SERVER; default own, or url when -admin-url/BENCH_ADMIN_URL is given)")
	flag.StringVar(&c.outDir, "out", envOr("BENCH_OUT", "results"), "directory for latest.json and latest.md (env BENCH_OUT)")
	flag.BoolVar(&c.analyze, "analyze", true, "ANALYZE after pre-inserting a backlog (burn-down, few-workers), as autovacuum would")
	flag.BoolVar(&c.keepDBs, "keep-dbs", false, "do not drop the per-run databases (debugging)")
	flag.BoolVar(&c.together, "together", envBool("BENCH_TOGETHER"), "run the systems of each repetition at the same time on the one server, each in its own database (as the public postgresql-job-queue-benchmarking harness does), instead of one after the other (env BENCH_TOGETHER=1)")
	flag.IntVar(&c.connCap, "conn-cap", envInt("BENCH_CONN_CAP", defaultConnCap), "peak scenarios: cap on every connection one run's process opens (its pools and sessions taken out of them) (env BENCH_CONN_CAP)")
	var tune string
	flag.StringVar(&tune, "tune", envOr("BENCH_TUNE", ""), "peak scenarios: override peak settings, 'system:key=value,key=value;system:...' (e.g. 'tenure:concurrency=300;river:pool=4'); keys per system in bench/README.md (env BENCH_TUNE)")
	flag.IntVar(&c.inserters, "inserters", envInt("BENCH_INSERTERS", 1), "bulk-enqueue: inserting goroutines, each with its own connection (env BENCH_INSERTERS)")
	flag.BoolVar(&c.ceiling, "ceiling", true, "bulk-enqueue: also measure the server's own insert ceiling (INSERT ... SELECT into the same table) in the same run")
	flag.IntVar(&c.jobs, "jobs", envInt("BENCH_JOBS", 0), "jobs of burn-down, peak-burn-down and bulk-enqueue instead of the mode's own (env BENCH_JOBS)")
	flag.DurationVar(&c.duration, "duration", 0, "duration of steady, peak-steady and held-xmin instead of the mode's own")
	flag.StringVar(&c.profileDir, "cpuprofile-dir", "", "write a Go CPU profile of every run's measured interval (the child process) to this directory, one file per run")
	flag.DurationVar(&c.phaseDur, "phase-duration", 0, "phases: run every phase this long instead of the schedule's own (120s, 120s, 60s, 60s; quick 4s)")
	flag.Func("pg-set", "with -server own (diagnosis, repeatable): an extra server setting name=value, e.g. pg_stat_statements.track=all", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("-pg-set %q: want name=value", v)
		}
		c.pgSettings = append(c.pgSettings, v)
		return nil
	})
	flag.Parse()
	var err error
	if c.tune, err = parseTune(tune); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	if c.server == "" {
		c.server = "own"
		flag.Visit(func(f *flag.Flag) {
			if f.Name == "admin-url" {
				c.server = "url"
			}
		})
		if os.Getenv("BENCH_ADMIN_URL") != "" {
			c.server = "url"
		}
	}
	if c.reps <= 0 {
		c.reps = 3
		if c.quick {
			c.reps = 1
		}
	}
	if scen == "" || scen == "all" {
		c.scenarios = scenario.All
	} else {
		for _, s := range strings.Split(scen, ",") {
			if s = strings.TrimSpace(s); s != "" {
				c.scenarios = append(c.scenarios, s)
			}
		}
	}
	for _, s := range strings.Split(systems, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(c.systems, s) {
			c.systems = append(c.systems, s)
		}
	}
	if len(c.systems) == 0 {
		c.systems, c.systemsDefault = defaultSystems, true
		if c.quick {
			// Quick mode keeps under 3 minutes by leaving out the variant that only changes the
			// engine's commit durability (name it with -systems to run it).
			c.systems = slices.DeleteFunc(slices.Clone(defaultSystems), func(s string) bool { return s == tenuresut.NameAsync })
		}
	}
	return c
}

// parseTune parses -tune: "system:key=value,key=value;system:key=value".
func parseTune(s string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, part := range strings.Split(s, ";") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		sys, kvs, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("-tune %q: want system:key=value,...", part)
		}
		d, err := sut.Get(strings.TrimSpace(sys))
		if err != nil {
			return nil, fmt.Errorf("-tune: %w", err)
		}
		m, err := sut.ParseTune(kvs)
		if err != nil {
			return nil, fmt.Errorf("-tune: %w", err)
		}
		if err := sut.CheckTune(d, m); err != nil {
			return nil, fmt.Errorf("-tune: %w", err)
		}
		out[d.Name] = m
	}
	return out, nil
}

// runChild runs one scenario in this process and prints its Result as JSON on stdout.
func runChild(specJSON string) int {
	var spec scenario.Spec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child: bad spec:", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	err := scenario.Run(ctx, spec, func(res *scenario.Result) {
		out, _ := json.Marshal(res)
		fmt.Println(string(out)) // stdout is unbuffered: the parent has it even if shutdown crashes
		// Shutting the queue down must not hold the whole comparison hostage.
		grace := cmp.Or(spec.StopTimeout, 30*time.Second) + 30*time.Second
		time.AfterFunc(grace, func() {
			fmt.Fprintf(os.Stderr, "child %s/%s: still shutting down %s after the measurement; exiting\n", spec.System, spec.Scenario, grace)
			os.Exit(3)
		})
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s/%s: %v\n", spec.System, spec.Scenario, err)
		return 1
	}
	return 0
}

// unit is one side of a comparison: a system, optionally with a specific bulk insert API.
type unit struct {
	System   string
	BatchAPI string
}

func (u unit) label() string {
	if u.BatchAPI == "" {
		return u.System
	}
	return u.System + "/" + u.BatchAPI
}

// phaseSchedule is the phases scenario's schedule in a full run (quick: 8 s each): the phases of
// the public postgresql-job-queue-benchmarking harness that Tenure's issue 17 table reports.
var phaseSchedule = []scenario.Phase{
	{Name: "clean", Duration: 120 * time.Second},
	{Name: "idle-in-tx", Duration: 120 * time.Second, Disturb: scenario.DisturbIdleInTx},
	{Name: "active-readers", Duration: 60 * time.Second, Disturb: scenario.DisturbReaders},
	{Name: "recovery", Duration: 60 * time.Second},
}

// plan returns the Spec template of a scenario (DBURL and System filled in per run).
func (c config) plan(name string) (scenario.Spec, error) {
	s := scenario.Spec{Scenario: name, PayloadBytes: c.payload, Batch: 1000, Analyze: c.analyze}
	pick := func(full, quick int) int {
		if c.quick {
			return quick
		}
		return full
	}
	dur := func(full, quick time.Duration) time.Duration {
		if c.quick {
			return quick
		}
		return full
	}
	switch name {
	case scenario.BurnDown:
		s.Workers, s.Jobs = c.workers, pick(200_000, 20_000)
		s.Duration = dur(10*time.Minute, 15*time.Second) // time limit
	case scenario.Steady, scenario.HeldXmin:
		s.Workers, s.Duration = c.workers, dur(30*time.Second, 3*time.Second)
		s.Batch, s.Producers, s.BacklogCap = 100, 2, 20*c.workers
		s.HoldXmin = name == scenario.HeldXmin
	case scenario.Latency:
		s.Workers, s.Rate, s.Batch = 32, 200, 0
		s.Duration, s.Warmup = dur(60*time.Second, 3*time.Second), dur(2*time.Second, time.Second)
	case scenario.PeakBurnDown:
		s.Peak, s.ConnCap = true, c.connCap
		s.Jobs = pick(200_000, 20_000)
		s.Duration = dur(10*time.Minute, 15*time.Second) // time limit
	case scenario.PeakSteady:
		s.Peak, s.ConnCap = true, c.connCap
		s.Duration = dur(30*time.Second, 3*time.Second)
		s.Batch, s.Producers, s.BacklogCap = 1000, 2, 20_000
	case scenario.BulkEnqueue:
		s.Jobs = pick(100_000, 20_000)
		s.Inserters, s.Ceiling, s.Rounds = max(1, c.inserters), c.ceiling, pick(3, 1)
	case scenario.Phases:
		s.Workers, s.Rate, s.Batch, s.Work = 32, 200, 0, time.Millisecond
		s.Readers, s.ReaderHold = 4, dur(20*time.Second, 2*time.Second)
		for _, p := range phaseSchedule {
			p.Duration = dur(p.Duration, 4*time.Second)
			if c.phaseDur > 0 {
				p.Duration = c.phaseDur
			}
			s.Phases = append(s.Phases, p)
		}
	case scenario.FewWorkers:
		s.Workers, s.Work = 8, time.Millisecond
		s.Duration, s.Jobs = dur(30*time.Second, 3*time.Second), pick(250_000, 15_000)
	default:
		return s, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(scenario.All, ", "))
	}
	switch name {
	case scenario.BurnDown, scenario.PeakBurnDown, scenario.BulkEnqueue:
		if c.jobs > 0 {
			s.Jobs = c.jobs
		}
	case scenario.Steady, scenario.PeakSteady, scenario.HeldXmin:
		if c.duration > 0 {
			s.Duration = c.duration
		}
	}
	s.MaxConns = int32(max(s.Workers, 1)/4 + 10)
	if s.Peak {
		s.MaxConns = 0 // the driver's (sut.Driver.PeakPool), within ConnCap
	} else if s.Inserters > 1 {
		s.MaxConns = max(s.MaxConns, int32(s.Inserters)+2)
	}
	s.StopTimeout = dur(30*time.Second, 5*time.Second)
	return s, nil
}

// units returns the sides of a scenario in A/B order. bulk-enqueue runs Tenure and River twice,
// once per bulk API, and compares like with like: InsertManyFast (COPY, a count) with
// InsertManyFast, InsertMany (rows returned) with InsertMany. A worker variant (tenure-async,
// river-default) is skipped where no worker runs if the system it varies is run: its inserts
// are the same. With the default -systems, defaultOnlyIn also applies.
func (c config) units(name string) []unit {
	var out []unit
	for _, sys := range c.systems {
		if d, err := sut.Get(sys); err == nil && d.WorkerVariantOf != "" && !scenario.RunsWorkers(name) &&
			slices.Contains(c.systems, d.WorkerVariantOf) {
			continue
		}
		if only, ok := defaultOnlyIn[sys]; ok && c.systemsDefault && !slices.Contains(only, name) {
			continue
		}
		if name == scenario.BulkEnqueue && sys == riversut.Name {
			out = append(out, unit{sys, riversut.RiverBatchFast}, unit{sys, riversut.RiverBatchReturning})
			continue
		}
		if name == scenario.BulkEnqueue && sys == tenuresut.Name {
			out = append(out, unit{sys, tenuresut.TenureBatchInsertManyFast}, unit{sys, tenuresut.TenureBatchInsertMany})
			continue
		}
		out = append(out, unit{System: sys})
	}
	return out
}

// systemsString lists the systems and, with the default selection, where the limited ones run.
func (c config) systemsString() string {
	s := strings.Join(c.systems, ",")
	if c.systemsDefault {
		for _, sys := range c.systems {
			if only, ok := defaultOnlyIn[sys]; ok {
				s += fmt.Sprintf(" (%s only in %s)", sys, strings.Join(only, ", "))
			}
		}
	}
	return s
}

// family returns the queue a system runs ("tenure" or "river"), "" if it is unknown.
func family(sys string) string {
	if d, err := sut.Get(sys); err == nil {
		return d.Family
	}
	return ""
}

type runKey struct {
	Scenario string
	Unit     unit
}

func runCompare(ctx context.Context, c config) error {
	for _, sys := range c.systems {
		if _, err := sut.Get(sys); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	switch c.server {
	case "own":
		srv, err := pgserver.StartWith(ctx, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }, pgserver.Options{
			Stock: true, Settings: append([]string{"autovacuum=on", "shared_preload_libraries=pg_stat_statements"}, c.pgSettings...)})
		if err != nil {
			return fmt.Errorf("start the benchmark's own PostgreSQL (or use -server url): %w", err)
		}
		defer srv.Stop()
		c.adminURL = srv.URL
		if err := pgutil.EnableStatements(ctx, c.adminURL); err != nil {
			fmt.Fprintf(os.Stderr, "compare: pg_stat_statements not available (%v); statement tables omitted\n", err)
		}
	case "url":
	default:
		return fmt.Errorf("-server %q: want own or url", c.server)
	}
	server, err := pgutil.ReadServerInfo(ctx, c.adminURL)
	if err != nil {
		return fmt.Errorf("read server info from %s: %w", c.adminURL, err)
	}
	specs := map[string]scenario.Spec{}
	for _, name := range c.scenarios {
		s, err := c.plan(name)
		if err != nil {
			return err
		}
		specs[name] = s
	}
	fmt.Fprintf(os.Stderr, "compare: %d scenario(s) × %d repetition(s), systems %s, quick=%v\n",
		len(c.scenarios), c.reps, c.systemsString(), c.quick)

	drops := &dropper{adminURL: c.adminURL}
	defer drops.wait()
	results := map[runKey][]*scenario.Result{}
	settings := map[string]map[string]string{}
	var failures []string
	started := time.Now()
	for _, name := range c.scenarios {
		spec := specs[name]
		for rep := 1; rep <= c.reps; rep++ {
			if c.together {
				// Every side at the same time, each in its own database on the one server, as
				// the public harness runs its adapters: they compete for the same CPUs and the
				// same server, and each side's "unrelated CPU" is mostly the other side.
				type out struct {
					u   unit
					res *scenario.Result
					err error
				}
				var wg sync.WaitGroup
				outs := make([]out, len(c.units(name)))
				for i, u := range c.units(name) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res, err := runOne(ctx, c, exe, spec, u, rep, drops)
						outs[i] = out{u, res, err}
					}()
				}
				wg.Wait()
				for _, o := range outs {
					if o.res != nil {
						results[runKey{name, o.u}] = append(results[runKey{name, o.u}], o.res)
						if settings[o.u.System] == nil && !spec.Peak {
							settings[o.u.System] = o.res.Settings
						}
					}
					if o.err != nil {
						msg := fmt.Sprintf("%s rep %d %s: %v", name, rep, o.u.label(), o.err)
						fmt.Fprintln(os.Stderr, "compare: FAILED", msg)
						failures = append(failures, msg)
					}
				}
				continue
			}
			for _, u := range c.units(name) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				res, err := runOne(ctx, c, exe, spec, u, rep, drops)
				if res != nil {
					results[runKey{name, u}] = append(results[runKey{name, u}], res)
					if settings[u.System] == nil && !spec.Peak {
						settings[u.System] = res.Settings
					}
				}
				if err != nil {
					msg := fmt.Sprintf("%s rep %d %s: %v", name, rep, u.label(), err)
					fmt.Fprintln(os.Stderr, "compare: FAILED", msg)
					failures = append(failures, msg)
				}
			}
		}
	}
	drops.wait()
	rep := buildReport(c, specs, server, results, settings, failures)
	rep.DurationS = time.Since(started).Seconds()
	if err := writeReport(c, rep); err != nil {
		return err
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d run(s) failed", len(failures))
	}
	return nil
}

var errAfterMeasurement = errors.New("shutdown failure")

// dropper drops each run's database in the background, so that the drop's forced checkpoint
// overlaps the creation of the next run's database instead of adding to it; the next child
// only starts once the previous drop has finished, so the drop never overlaps a measurement.
type dropper struct {
	adminURL string
	mu       sync.Mutex
	pending  []chan struct{}
}

func (d *dropper) drop(name string) {
	d.wait()
	done := make(chan struct{})
	d.mu.Lock()
	d.pending = append(d.pending, done)
	d.mu.Unlock()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := pgutil.DropDatabase(ctx, d.adminURL, name); err != nil {
			fmt.Fprintf(os.Stderr, "compare: drop %s: %v\n", name, err)
		}
	}()
}

// wait returns when every drop started so far has finished (safe for concurrent use).
func (d *dropper) wait() {
	d.mu.Lock()
	p := d.pending
	d.pending = nil
	d.mu.Unlock()
	for _, ch := range p {
		<-ch
	}
}

// runOne creates a fresh database, runs one child in it, and schedules the database's drop.
func runOne(ctx context.Context, c config, exe string, spec scenario.Spec, u unit, rep int, drops *dropper) (*scenario.Result, error) {
	dbName := fmt.Sprintf("tbench_%d_%s_%s_%d", os.Getpid(), strings.ReplaceAll(u.System, "-", "_"),
		strings.ReplaceAll(spec.Scenario, "-", "_"), rep)
	if u.BatchAPI != "" {
		dbName += "_" + strings.ToLower(u.BatchAPI)
	}
	err := pgutil.CreateDatabase(ctx, c.adminURL, dbName)
	drops.wait()
	if err != nil {
		return nil, err
	}
	if !c.keepDBs {
		defer drops.drop(dbName)
	}
	dbURL, err := pgutil.WithDatabase(c.adminURL, dbName)
	if err != nil {
		return nil, err
	}
	spec.System, spec.BatchAPI, spec.DBURL = u.System, u.BatchAPI, dbURL
	if spec.Peak {
		spec.Tune = c.tune[u.System]
	}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return nil, err
		}
		abs, err := filepath.Abs(filepath.Join(c.profileDir, dbName+".pprof"))
		if err != nil {
			return nil, err
		}
		spec.CPUProfile = abs
	}
	specJSON, _ := json.Marshal(spec)
	fmt.Fprintf(os.Stderr, "==> %-12s rep %d  %-22s (db %s)\n", spec.Scenario, rep, u.label(), dbName)
	cctx, cancel := context.WithTimeout(ctx, spec.Duration+15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe, "-child", string(specJSON))
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	runErr := cmd.Run()
	var res scenario.Result
	parsed := false
	if out := strings.TrimSpace(stdout.String()); out != "" {
		lines := strings.Split(out, "\n")
		parsed = json.Unmarshal([]byte(lines[len(lines)-1]), &res) == nil
	}
	switch {
	case runErr != nil && !parsed:
		return nil, fmt.Errorf("child: %w", runErr)
	case runErr != nil:
		// The measurement finished and was published; the queue failed while shutting down.
		fmt.Fprintf(os.Stderr, "    %s\n", summarize(&res))
		return &res, fmt.Errorf("%w: the child failed after publishing its measurement (kept): %v", errAfterMeasurement, runErr)
	case !parsed:
		return nil, fmt.Errorf("child printed no result")
	}
	fmt.Fprintf(os.Stderr, "    %s\n", summarize(&res))
	return &res, nil
}

func summarize(r *scenario.Result) string {
	var parts []string
	for _, k := range []string{scenario.MJobsPerS, scenario.MInsertedPerS, scenario.MCompletedPerS,
		scenario.MP50, scenario.MP95, scenario.MP99, scenario.MDeadTuples, scenario.MConnsMax,
		scenario.MCeilingPerS, scenario.MOfCeiling} {
		if v, ok := r.Metrics[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%s", k, fmtNum(v)))
		}
	}
	parts = append(parts, fmt.Sprintf("elapsed=%.2fs bench_cpu=%.2fs pg_cpu=%.2fs jobs=%d",
		r.Elapsed, r.BenchCPU, r.PGCPU, r.Jobs))
	return strings.Join(parts, " ")
}

func writeReport(c config, rep *report) error {
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	jsonPath := filepath.Join(c.outDir, "latest.json")
	if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
		return err
	}
	md := rep.markdown()
	mdPath := filepath.Join(c.outDir, "latest.md")
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print(rep.text())
	fmt.Fprintf(os.Stderr, "compare: wrote %s and %s\n", jsonPath, mdPath)
	return nil
}
