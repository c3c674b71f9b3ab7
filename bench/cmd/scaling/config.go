package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenureq/tenure/bench/internal/pgutil"
)

// Sweep names, in run order.
const (
	SweepBacklog  = "backlog"
	SweepFinished = "finished"
	SweepQueues   = "queues"
	SweepWorkers  = "workers"
	SweepSoak     = "soak"
)

// AllSweeps lists the sweeps in run order.
var AllSweeps = []string{SweepBacklog, SweepFinished, SweepQueues, SweepWorkers, SweepSoak}

// config is the command's configuration.
type config struct {
	quick  bool
	sweeps []string

	backlogs []int // ready backlog sweep points
	finished []int // finished rows retained sweep points
	queues   []int // queues with work sweep points
	workers  []int // total slots sweep points

	slots int // the standard worker's slots (Concurrency) where the sweep does not vary them
	// sharedSlots: the queues sweep's worker shares its slots between the queues
	// (worker.Config.Slots = slots, each queue's Concurrency = slots).
	sharedSlots bool
	slice       int // jobs measured per point (fewer when the backlog is smaller)
	fixedReady  int // ready backlog of the finished, queues and workers sweeps
	payload     int // approximate encoded args size
	engineCap   int // cap on the engine pool's connections
	pointLimit  time.Duration
	soakDur     time.Duration
	soakLoad    float64 // share of measured capacity offered during the soak
	soakCap     float64 // > 0: the capacity the share is of, given instead of measured
	soakRetain  time.Duration
	capacityDur time.Duration
	sampleEvery time.Duration

	server   string // own or url
	adminURL string
	outDir   string
	publish  string // date prefix: also write <publish>-scaling.{md,json} and scaling-*.svg
	merge    string // a previous run's JSON whose sweeps are kept unless rerun
	render   string // only re-render this JSON report's markdown and plots (no run)
	keepDBs  bool
	// cpuProfile: write a Go CPU profile of each point's measured window to <cpuProfile>-<sweep>-<x>.pprof.
	cpuProfile string
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
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

// parseInts parses "10k,100000,1M" (k and M suffixes allowed).
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"), strings.HasSuffix(f, "K"):
			mult, f = 1000, f[:len(f)-1]
		case strings.HasSuffix(f, "M"):
			mult, f = 1_000_000, f[:len(f)-1]
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a non-negative count", f)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}

// intsFlag is a flag holding a list of counts.
type intsFlag struct{ v *[]int }

func (f intsFlag) String() string {
	if f.v == nil {
		return ""
	}
	var parts []string
	for _, n := range *f.v {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ",")
}

func (f intsFlag) Set(s string) error {
	v, err := parseInts(s)
	if err != nil {
		return err
	}
	*f.v = v
	return nil
}

// parseConfig parses the command line (args without the program name). BENCH_QUICK=1 in the
// environment means -quick; explicit flags override what -quick chooses.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("scaling", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var sweeps string
	var backlogs, finished, queues, workers []int
	fs.BoolVar(&c.quick, "quick", envBool("BENCH_QUICK"), "tiny sweeps and a 9 s soak (under a minute; env BENCH_QUICK=1)")
	fs.StringVar(&sweeps, "sweeps", envOr("BENCH_SWEEPS", "all"), "comma-separated sweeps or 'all' (env BENCH_SWEEPS): "+strings.Join(AllSweeps, ", "))
	fs.Var(intsFlag{&backlogs}, "backlogs", "ready backlog points (default 10k,100k,1M,5M; quick 1k,20k)")
	fs.Var(intsFlag{&finished}, "finished", "finished rows retained points (default 0,100k,1M,10M; quick 0,50k)")
	fs.Var(intsFlag{&queues}, "queues", "queues-with-work points (default 1,10,100,1000; quick 1,10)")
	fs.Var(intsFlag{&workers}, "workers", "total slots points (default 8,32,128,512,2000; quick 8,128)")
	fs.IntVar(&c.slots, "slots", 100, "slots (Concurrency) of the standard worker")
	fs.BoolVar(&c.sharedSlots, "shared-slots", false, "queues sweep: the worker's -slots slots are a pool the queues share (worker.Config.Slots), each queue's Concurrency = -slots; default: each queue has max(1, slots/queues) of its own")
	fs.IntVar(&c.slice, "slice", 0, "jobs measured per point (default 100000; quick 5000)")
	fs.IntVar(&c.fixedReady, "ready", 0, "ready backlog of the finished, queues and workers sweeps (default 150000; quick 10000)")
	fs.IntVar(&c.payload, "payload", 256, "approximate encoded job args size in bytes")
	fs.IntVar(&c.engineCap, "engine-conns-cap", 100, "at most this many connections in the worker's engine pool (the library's default size: worker.EnginePoolSize)")
	fs.DurationVar(&c.pointLimit, "point-limit", 5*time.Minute, "give up a point's measurement after this long")
	fs.DurationVar(&c.soakDur, "soak-duration", 30*time.Minute, "soak length (quick 9s)")
	fs.Float64Var(&c.soakLoad, "soak-load", 0.7, "share of the measured capacity offered during the soak")
	fs.Float64Var(&c.soakCap, "soak-capacity", 0, "jobs/s: the capacity -soak-load is a share of, instead of measuring it first (the measurement's 20 s saturated run is shorter than a vacuum cycle and varies from run to run; give an earlier run's figure to offer a known rate)")
	fs.DurationVar(&c.soakRetain, "soak-retention", 5*time.Minute, "worker.Config.FinishedRetention during the soak, so the pruned steady state is reached inside the run (library default 24h)")
	fs.DurationVar(&c.capacityDur, "capacity-duration", 20*time.Second, "length of the saturated run that measures capacity before the soak (quick 2s)")
	fs.DurationVar(&c.sampleEvery, "sample-every", 15*time.Second, "soak sampling period (quick 3s)")
	fs.StringVar(&c.server, "server", envOr("BENCH_SERVER", ""), "own: start a production-like PostgreSQL (stock settings, autovacuum on, pg_stat_statements); url: the server of -admin-url (default own, or url when -admin-url/BENCH_ADMIN_URL is given)")
	fs.StringVar(&c.adminURL, "admin-url", envOr("BENCH_ADMIN_URL", pgutil.DefaultAdminURL), "with -server url: an admin database on the server")
	fs.StringVar(&c.outDir, "out", envOr("BENCH_OUT", "results"), "directory for latest-scaling.{json,md} and the plots")
	fs.StringVar(&c.publish, "publish", "", "also write <publish>-scaling.{md,json} and scaling-*.svg (e.g. -publish 2026-12-01)")
	fs.StringVar(&c.merge, "merge", "", "start from this earlier JSON report: its sweeps are kept unless this run reruns them")
	fs.StringVar(&c.render, "render", "", "run nothing: re-render the markdown and the plots of this JSON report (into -out; with -publish, the published names too)")
	fs.BoolVar(&c.keepDBs, "keep-dbs", false, "do not drop the per-point databases (debugging)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a Go CPU profile of each point's measured window to <prefix>-<sweep>-<x>.pprof (profiling)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.server == "" {
		c.server = "own"
		if set["admin-url"] || os.Getenv("BENCH_ADMIN_URL") != "" {
			c.server = "url"
		}
	}
	if c.server != "own" && c.server != "url" {
		return c, fmt.Errorf("-server %q: want own or url", c.server)
	}
	pickInts := func(dst *[]int, given []int, full, quick []int) {
		switch {
		case given != nil:
			*dst = given
		case c.quick:
			*dst = quick
		default:
			*dst = full
		}
	}
	pickInts(&c.backlogs, backlogs, []int{10_000, 100_000, 1_000_000, 5_000_000}, []int{1_000, 20_000})
	pickInts(&c.finished, finished, []int{0, 100_000, 1_000_000, 10_000_000}, []int{0, 50_000})
	pickInts(&c.queues, queues, []int{1, 10, 100, 1000}, []int{1, 10})
	pickInts(&c.workers, workers, []int{8, 32, 128, 512, 2000}, []int{8, 128})
	pick := func(v *int, full, quick int) {
		if !set[flagFor(v, &c)] {
			*v = full
			if c.quick {
				*v = quick
			}
		}
	}
	pick(&c.slice, 100_000, 5_000)
	pick(&c.fixedReady, 150_000, 10_000)
	pickDur := func(name string, v *time.Duration, quick time.Duration) {
		if c.quick && !set[name] {
			*v = quick
		}
	}
	pickDur("soak-duration", &c.soakDur, 9*time.Second)
	pickDur("capacity-duration", &c.capacityDur, 2*time.Second)
	pickDur("sample-every", &c.sampleEvery, 3*time.Second)
	pickDur("soak-retention", &c.soakRetain, 10*time.Second)
	if sweeps == "" || sweeps == "all" {
		c.sweeps = AllSweeps
	} else {
		for _, s := range strings.Split(sweeps, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if !slices.Contains(AllSweeps, s) {
				return c, fmt.Errorf("unknown sweep %q (known: %s)", s, strings.Join(AllSweeps, ", "))
			}
			if !slices.Contains(c.sweeps, s) {
				c.sweeps = append(c.sweeps, s)
			}
		}
		if len(c.sweeps) == 0 {
			return c, fmt.Errorf("-sweeps selects nothing")
		}
	}
	switch {
	case c.slots < 1 || c.slots > 10000:
		return c, fmt.Errorf("-slots %d outside 1..10000", c.slots)
	case c.slice < 1:
		return c, fmt.Errorf("-slice must be positive")
	case c.fixedReady < c.slice:
		return c, fmt.Errorf("-ready %d must be at least -slice %d (the backlog must not run dry inside the measured slice)", c.fixedReady, c.slice)
	case c.soakLoad <= 0 || c.soakLoad > 1:
		return c, fmt.Errorf("-soak-load %v outside (0, 1]", c.soakLoad)
	case c.soakCap < 0:
		return c, fmt.Errorf("-soak-capacity %v below 0", c.soakCap)
	case c.sampleEvery < time.Second:
		return c, fmt.Errorf("-sample-every below 1s")
	case c.engineCap < 5:
		return c, fmt.Errorf("-engine-conns-cap below 5")
	}
	for _, q := range c.queues {
		if q < 1 || q > 10000 {
			return c, fmt.Errorf("-queues point %d outside 1..10000", q)
		}
	}
	for _, w := range c.workers {
		if w < 1 || w > 10000 {
			return c, fmt.Errorf("-workers point %d outside 1..10000", w)
		}
	}
	return c, nil
}

// flagFor names the flag that sets an int field of c (for the quick defaults).
func flagFor(v *int, c *config) string {
	switch v {
	case &c.slice:
		return "slice"
	case &c.fixedReady:
		return "ready"
	}
	return ""
}
