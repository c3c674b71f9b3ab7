package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/bench/internal/scenario"
	"github.com/tenureq/tenure/bench/internal/sut"
	"github.com/tenureq/tenure/bench/internal/sut/riversut"
	"github.com/tenureq/tenure/bench/internal/sut/tenuresut"
)

// metricDef says how to extract, label and orient one reported metric.
type metricDef struct {
	Key          string // Result.Metrics key, or a derived key below
	Label        string
	Unit         string
	HigherBetter bool
}

// Derived metric keys (computed from a Result's CPU fields).
const (
	dBenchCPU = "bench_cpu_per_1k"
	dPGCPU    = "pg_cpu_per_1k"
	dWALMB    = "wal_mb_per_1k"
	dWALFPI   = "wal_fpi_per_1k"
	dCkpt     = "checkpoints"
)

var cpuDefs = []metricDef{
	{dBenchCPU, "bench process CPU", "cpu-s / 1k jobs", false},
	{dPGCPU, "postgres CPU", "cpu-s / 1k jobs", false},
	// The server's whole WAL over the interval (one system runs at a time) and the full-page
	// images in it: a page's first change after a checkpoint logs all 8 kB of it, so how many
	// checkpoints fell into a run moves both (and the CPU) for reasons outside the queue.
	{dWALMB, "WAL written", "MB / 1k jobs", false},
	{dWALFPI, "WAL full-page images", "pages / 1k jobs", false},
	{dCkpt, "checkpoints started in the interval", "count", false},
}

var scenarioDefs = map[string][]metricDef{
	scenario.BurnDown: {
		{scenario.MJobsPerS, "throughput", "jobs/s", true},
	},
	scenario.Steady: {
		{scenario.MInsertedPerS, "inserted", "jobs/s", true},
		{scenario.MCompletedPerS, "completed", "jobs/s", true},
		{scenario.MP50, "claim latency p50", "ms", false},
		{scenario.MP99, "claim latency p99", "ms", false},
		{scenario.MDeadTuples, "dead tuples at end", "rows", false},
		{scenario.MDeadPer1k, "dead tuples per 1k completed", "rows", false},
	},
	scenario.Latency: {
		{scenario.MP50, "pickup latency p50", "ms", false},
		{scenario.MP95, "pickup latency p95", "ms", false},
		{scenario.MP99, "pickup latency p99", "ms", false},
		{scenario.MCompletedPerS, "completed (offered 200)", "jobs/s", true},
	},
	scenario.BulkEnqueue: {
		{scenario.MJobsPerS, "throughput", "jobs/s", true},
		{scenario.MCeilingPerS, "server's own insert ceiling, same table", "rows/s", true},
		{scenario.MOfCeiling, "throughput as % of own ceiling", "%", true},
	},
	scenario.PeakBurnDown: {
		{scenario.MJobsPerS, "throughput", "jobs/s", true},
		{scenario.MConnsMax, "connections held, max", "conns", false},
	},
	scenario.PeakSteady: {
		{scenario.MInsertedPerS, "inserted", "jobs/s", true},
		{scenario.MCompletedPerS, "completed", "jobs/s", true},
		{scenario.MP50, "claim latency p50", "ms", false},
		{scenario.MP99, "claim latency p99", "ms", false},
		{scenario.MDeadPer1k, "dead tuples per 1k completed", "rows", false},
		{scenario.MConnsMax, "connections held, max", "conns", false},
	},
	scenario.HeldXmin: {
		{scenario.MInsertedPerS, "inserted", "jobs/s", true},
		{scenario.MCompletedPerS, "completed", "jobs/s", true},
		{scenario.MP50, "claim latency p50", "ms", false},
		{scenario.MP99, "claim latency p99", "ms", false},
		{scenario.MDeadTuples, "dead tuples at end", "rows", false},
		{scenario.MDeadPer1k, "dead tuples per 1k completed", "rows", false},
	},
	scenario.FewWorkers: {
		{scenario.MCompletedPerS, "completed", "jobs/s", true},
	},
}

func init() {
	var defs []metricDef
	for _, p := range phaseSchedule {
		for _, d := range []metricDef{
			{scenario.MP50, "pickup latency p50", "ms", false},
			{scenario.MP95, "pickup latency p95", "ms", false},
			{scenario.MP99, "pickup latency p99", "ms", false},
			{scenario.MCompletedPerS, "completed (offered 200)", "jobs/s", true},
			{scenario.MDepthMax, "claimable backlog, max", "jobs", false},
			{scenario.MBacklogEnd, "unfinished at phase end", "jobs", false},
		} {
			d.Key, d.Label = scenario.PhaseMetric(p.Name, d.Key), p.Name+": "+d.Label
			defs = append(defs, d)
		}
	}
	scenarioDefs[scenario.Phases] = defs
}

func metricValue(r *scenario.Result, key string) (float64, bool) {
	switch key {
	case dBenchCPU:
		if r.Jobs <= 0 {
			return 0, false
		}
		return r.BenchCPU / (float64(r.Jobs) / 1000), true
	case dPGCPU:
		if r.Jobs <= 0 || !r.PGCPUValid {
			return 0, false
		}
		return r.PGCPU / (float64(r.Jobs) / 1000), true
	case dWALMB, dWALFPI, dCkpt:
		if r.Jobs <= 0 || !r.WALValid {
			return 0, false
		}
		switch key {
		case dWALMB:
			return float64(r.WAL.Bytes) / 1e6 / (float64(r.Jobs) / 1000), true
		case dWALFPI:
			return float64(r.WAL.FPI) / (float64(r.Jobs) / 1000), true
		}
		return float64(r.WAL.Checkpoints), true
	}
	v, ok := r.Metrics[key]
	return v, ok
}

// row is one comparison of one metric: one Tenure variant against one River variant. The
// metric name says which variants unless they are the primary ones: "completed [tenure-async]"
// is tenure-async against river, "completed (vs river-default)" is tenure against
// river-default; tenure_system and river_system name them too.
type row struct {
	Scenario     string    `json:"scenario"`
	Metric       string    `json:"metric"`
	Unit         string    `json:"unit"`
	Tenure       *float64  `json:"tenure"`
	River        *float64  `json:"river"`
	Ratio        *float64  `json:"ratio"`
	RatioNote    string    `json:"ratio_note,omitempty"`
	TenureSystem string    `json:"tenure_system"`
	RiverSystem  string    `json:"river_system"`
	HigherBetter bool      `json:"higher_is_better"`
	TenureRuns   []float64 `json:"tenure_runs"`
	RiverRuns    []float64 `json:"river_runs"`
	// line is the row's line in the text and markdown tables, where the Tenure variants are
	// columns: Metric without the Tenure variant's marker.
	line string
}

// newRow starts the row comparing metric label of Tenure unit tu with River unit ru.
func newRow(scen, label, unitName string, higherBetter bool, tu, ru unit) row {
	suffix := ""
	switch {
	case ru.BatchAPI != "" && tu.BatchAPI == ru.BatchAPI:
		suffix += " (both " + ru.BatchAPI + ")"
	case ru.BatchAPI != "":
		suffix += " (River " + ru.BatchAPI + ")"
	case tu.BatchAPI != "":
		// No River side for this API (a one-sided run): the line still names Tenure's API, so
		// the two APIs' rows stay apart.
		suffix += " (" + tu.BatchAPI + ")"
	}
	if ru.System != riversut.Name {
		suffix += " (vs " + ru.System + ")"
	}
	marker := ""
	if tu.System != tenuresut.Name {
		marker = " [" + tu.System + "]"
	}
	return row{Scenario: scen, Metric: label + marker + suffix, Unit: unitName, HigherBetter: higherBetter,
		TenureSystem: tu.System, RiverSystem: ru.System, line: label + suffix}
}

type machineInfo struct {
	CPUs      int    `json:"cpus"`
	Model     string `json:"model"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	MemoryGiB int    `json:"memory_gib,omitempty"`
}

type report struct {
	Date     string            `json:"date"`
	Machine  machineInfo       `json:"machine"`
	Postgres pgutil.ServerInfo `json:"postgres"`
	Config   reportConfig      `json:"config"`
	Results  []row             `json:"results"`
	Failures []string          `json:"failures,omitempty"`
	// Interference is, per scenario and side, the median share of the machine's CPU used by
	// processes other than the bench and PostgreSQL during the measured intervals.
	Interference []string `json:"interference,omitempty"`
	// Targets evaluates the goals on this run's medians.
	Targets   []string `json:"targets,omitempty"`
	Notes     []string `json:"notes,omitempty"`
	DurationS float64  `json:"duration_s"`
	// Statements: per scenario and side, the first repetition's top statements over the
	// measured interval (pg_stat_statements; only when the server loads it).
	Statements []runStatements `json:"statements,omitempty"`
	specs      map[string]scenario.Spec
}

type runStatements struct {
	Scenario   string             `json:"scenario"`
	System     string             `json:"system"`
	Jobs       int64              `json:"jobs"`
	Statements []pgutil.Statement `json:"statements"`
}

type reportConfig struct {
	Quick        bool                         `json:"quick"`
	Repetitions  int                          `json:"repetitions"`
	Order        string                       `json:"order"`
	Systems      []string                     `json:"systems"`
	PayloadBytes int                          `json:"payload_bytes"`
	Analyze      bool                         `json:"analyze_after_preinsert"`
	Latency      string                       `json:"latency_definition"`
	SystemConfig map[string]map[string]string `json:"system_settings"`
	Scenarios    map[string]scenarioConfig    `json:"scenarios"`
	// SystemScenarios lists the scenarios each system ran in (the default selection runs
	// river-default only in latency and few-workers; worker variants skip bulk-enqueue).
	SystemScenarios map[string][]string `json:"system_scenarios"`
	// SystemDescriptions says how each system (variant) is configured.
	SystemDescriptions map[string]string `json:"system_descriptions"`
}

type scenarioConfig struct {
	Workers       int     `json:"workers,omitempty"`
	PoolMaxConns  int32   `json:"pool_max_conns"`
	Jobs          int     `json:"jobs,omitempty"`
	DurationS     float64 `json:"duration_s,omitempty"`
	TimeLimitS    float64 `json:"time_limit_s,omitempty"`
	WarmupS       float64 `json:"warmup_s,omitempty"`
	Batch         int     `json:"batch,omitempty"`
	Producers     int     `json:"producers,omitempty"`
	BacklogCap    int     `json:"backlog_cap,omitempty"`
	RatePerS      int     `json:"offered_rate_per_s,omitempty"`
	HandlerWorkMS float64 `json:"handler_work_ms"`
	HoldXmin      bool    `json:"hold_xmin,omitempty"`
	// Phases describes the phases scenario's schedule, e.g. "clean 120s, idle-in-tx 120s (...)".
	Phases string `json:"phases,omitempty"`
	// ConnCap caps every connection of a run's process (peak scenarios); PeakSettings are each
	// system's peak settings as the first repetition reported them.
	ConnCap      int                          `json:"conn_cap,omitempty"`
	PeakSettings map[string]map[string]string `json:"peak_settings,omitempty"`
	// Inserters, Ceiling and Rounds: bulk-enqueue's inserting connections, whether the server's
	// own insert ceiling was measured, and how many queue passes the medians are of.
	Inserters int  `json:"inserters,omitempty"`
	Ceiling   bool `json:"ceiling,omitempty"`
	Rounds    int  `json:"rounds,omitempty"`
}

const latencyDefinition = "enqueue-commit → handler-start: from the moment the insert call returns " +
	"(commit acknowledged) to the moment the handler is entered, clamped at 0; the same clock and " +
	"definition for both queues. Reported as 'claim latency' in steady/held-xmin."

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func buildReport(c config, specs map[string]scenario.Spec, server pgutil.ServerInfo,
	results map[runKey][]*scenario.Result, settings map[string]map[string]string, failures []string) *report {
	rep := &report{
		Date:     time.Now().UTC().Format(time.RFC3339),
		Machine:  readMachine(),
		Postgres: server,
		Failures: failures,
		specs:    specs,
		Config: reportConfig{
			Quick: c.quick, Repetitions: c.reps, Systems: c.systems, PayloadBytes: c.payload,
			Order:        "per scenario and repetition: " + orderString(c),
			Analyze:      c.analyze,
			Latency:      latencyDefinition,
			SystemConfig: map[string]map[string]string{},
			Scenarios:    map[string]scenarioConfig{},

			SystemScenarios:    map[string][]string{},
			SystemDescriptions: map[string]string{},
		},
	}
	for _, name := range c.scenarios {
		for _, u := range c.units(name) {
			if rs := results[runKey{name, u}]; len(rs) > 0 && rs[0] != nil && len(rs[0].Statements) > 0 {
				rep.Statements = append(rep.Statements, runStatements{Scenario: name, System: u.label(),
					Jobs: rs[0].Jobs, Statements: rs[0].Statements})
			}
		}
	}
	for _, name := range c.scenarios {
		for _, u := range c.units(name) {
			if !slices.Contains(rep.Config.SystemScenarios[u.System], name) {
				rep.Config.SystemScenarios[u.System] = append(rep.Config.SystemScenarios[u.System], name)
			}
		}
	}
	for _, sys := range c.systems {
		if d, err := sut.Get(sys); err == nil {
			rep.Config.SystemDescriptions[sys] = d.Description
		}
	}
	for sys, s := range settings {
		clean := map[string]string{}
		for k, v := range s {
			if k == "MaxWorkers" || k == "Concurrency" || k == "pool MaxConns" || k == "bulk insert API" {
				continue // per scenario, see config.scenarios
			}
			clean[k] = v
		}
		ran := map[string]scenario.Spec{}
		for _, name := range rep.Config.SystemScenarios[sys] {
			ran[name] = specs[name]
		}
		switch family(sys) {
		case "river":
			clean["MaxWorkers"] = workersBySpec(ran)
		case "tenure":
			clean["Concurrency"] = workersBySpec(ran)
		}
		rep.Config.SystemConfig[sys] = clean
	}
	for name, s := range specs {
		sc := scenarioConfig{
			Workers: s.Workers, PoolMaxConns: s.MaxConns, Jobs: s.Jobs,
			DurationS: s.Duration.Seconds(), WarmupS: s.Warmup.Seconds(), Batch: s.Batch,
			Producers: s.Producers, BacklogCap: s.BacklogCap, RatePerS: s.Rate,
			HandlerWorkMS: float64(s.Work) / float64(time.Millisecond), HoldXmin: s.HoldXmin,
		}
		if name == scenario.BurnDown || name == scenario.PeakBurnDown {
			sc.TimeLimitS, sc.DurationS = sc.DurationS, 0
		}
		if name == scenario.BulkEnqueue {
			sc.Inserters, sc.Ceiling, sc.Rounds = max(1, s.Inserters), s.Ceiling, s.Rounds
		}
		if s.Peak {
			sc.ConnCap, sc.PeakSettings = s.ConnCap, map[string]map[string]string{}
			for _, u := range c.units(name) {
				if rs := results[runKey{name, u}]; len(rs) > 0 && rs[0] != nil {
					sc.PeakSettings[u.System] = rs[0].Settings
				}
			}
		}
		var ph []string
		for _, p := range s.Phases {
			d := p.Name + " " + p.Duration.String()
			switch p.Disturb {
			case scenario.DisturbIdleInTx:
				d += " (one session holds BEGIN; SELECT txid_current())"
			case scenario.DisturbReaders:
				d += fmt.Sprintf(" (%d sessions keep %s REPEATABLE READ transactions scanning the queue table every 100 ms)", s.Readers, s.ReaderHold)
			}
			ph = append(ph, d)
		}
		sc.Phases = strings.Join(ph, ", ")
		rep.Config.Scenarios[name] = sc
	}

	collect := func(name string, u unit, key string) []float64 {
		var out []float64
		for _, r := range results[runKey{name, u}] {
			if v, ok := metricValue(r, key); ok {
				out = append(out, v)
			}
		}
		return out
	}
	// Every Tenure variant against every River variant of the scenario: the River side's rows
	// in blocks (bulk API, then variant), the Tenure variants next to each other.
	sides := func(name string) (tenureUs, riverUs []unit) {
		for _, u := range c.units(name) {
			switch family(u.System) {
			case "tenure":
				tenureUs = append(tenureUs, u)
			case "river":
				riverUs = append(riverUs, u)
			}
		}
		if len(tenureUs) == 0 {
			tenureUs = []unit{{System: tenuresut.Name}} // keep River's rows even with -systems river
		}
		if len(riverUs) == 0 {
			riverUs = []unit{{System: riversut.Name}} // keep Tenure's rows even with -systems tenure
		}
		return tenureUs, riverUs
	}
	for _, name := range c.scenarios {
		tenureUs, riverUs := sides(name)
		defs := append(slices.Clone(scenarioDefs[name]), cpuDefs...)
		for _, ru := range riverUs {
			for _, d := range defs {
				for _, tu := range tenureUs {
					if tu.BatchAPI != "" && ru.BatchAPI != "" && tu.BatchAPI != ru.BatchAPI {
						continue // bulk-enqueue: like with like (COPY with COPY, rows returned with rows returned)
					}
					rw := newRow(name, d.Label, d.Unit, d.HigherBetter, tu, ru)
					rw.TenureRuns = collect(name, tu, d.Key)
					rw.RiverRuns = collect(name, ru, d.Key)
					fillRow(&rw)
					rep.Results = append(rep.Results, rw)
				}
			}
		}
	}
	// Held-xmin relative to steady: how much throughput each queue keeps when xmin is pinned.
	if slices.Contains(c.scenarios, scenario.Steady) && slices.Contains(c.scenarios, scenario.HeldXmin) {
		kept := func(sys string) []float64 {
			s := collect(scenario.Steady, unit{System: sys}, scenario.MCompletedPerS)
			h := collect(scenario.HeldXmin, unit{System: sys}, scenario.MCompletedPerS)
			if len(s) == 0 || len(h) == 0 || median(s) == 0 {
				return nil
			}
			return []float64{100 * median(h) / median(s)}
		}
		tenureUs, riverUs := sides(scenario.HeldXmin)
		for _, ru := range riverUs {
			for _, tu := range tenureUs {
				rw := newRow(scenario.HeldXmin, "completed jobs/s kept vs steady", "%", true, tu, ru)
				rw.TenureRuns, rw.RiverRuns = kept(tu.System), kept(ru.System)
				fillRow(&rw)
				rep.Results = append(rep.Results, rw)
			}
		}
	}
	if slices.Contains(c.scenarios, scenario.FewWorkers) {
		rep.Targets = fewWorkersTargets(rep.Results)
	}
	rep.Targets = append(rep.Targets, peakTargets(rep.Results)...)
	rep.Targets = append(rep.Targets, bulkTargets(rep.Results)...)
	rep.Notes = append(rep.Notes,
		"ratio = tenure/river for higher-is-better metrics and river/tenure for lower-is-better ones: > 1 always means Tenure is better; "+
			"each result compares the Tenure variant tenure_system with the River variant river_system (a metric name marked [tenure-async] or (vs river-default) says so)",
		"values are medians over the repetitions; *_runs hold every repetition",
		"postgres CPU counts the postmaster, the cluster-wide auxiliary processes and every backend of the run's own database (utime+stime from /proc)",
	)
	if server.Settings["autovacuum"] == "off" {
		rep.Notes = append(rep.Notes, "autovacuum is off on this server: dead tuples are never vacuumed during the runs")
	}
	// Interference: how much of the machine other processes used during each scenario's runs.
	for _, name := range c.scenarios {
		var parts []string
		for _, u := range c.units(name) {
			var shares []float64
			for _, r := range results[runKey{name, u}] {
				if r.MachineCPU > 0 {
					shares = append(shares, 100*r.ForeignCPU/r.MachineCPU)
				}
			}
			if len(shares) > 0 {
				parts = append(parts, fmt.Sprintf("%s %.0f%%", u.label(), median(shares)))
			}
		}
		if len(parts) > 0 {
			rep.Interference = append(rep.Interference, fmt.Sprintf("%s: %s", name, strings.Join(parts, ", ")))
		}
	}
	for key, rs := range results {
		for i, r := range rs {
			for _, n := range r.Notes {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s rep %d %s: %s", key.Scenario, i+1, key.Unit.label(), n))
			}
		}
	}
	slices.Sort(rep.Notes[3:])
	return rep
}

// The target for few-workers: at least this many jobs/s, and at least this many times
// River with its default fetch settings.
const (
	fewWorkersTargetJobsPerS = 2500
	fewWorkersTargetVsDef    = 10
)

// fewWorkersTargets evaluates the few-workers target for every Tenure variant.
func fewWorkersTargets(rows []row) []string {
	var out []string
	for _, rw := range rows {
		if rw.Scenario != scenario.FewWorkers || rw.line != "completed (vs "+riversut.NameDefault+")" || rw.Tenure == nil {
			continue
		}
		verdict := "not met"
		switch {
		case rw.Ratio == nil:
			verdict = "not evaluated (no ratio)"
		case *rw.Tenure >= fewWorkersTargetJobsPerS && *rw.Ratio >= fewWorkersTargetVsDef:
			verdict = "met"
		}
		ratio := "—"
		if rw.Ratio != nil {
			ratio = fmt.Sprintf("%.1f×", *rw.Ratio)
		}
		out = append(out, fmt.Sprintf("few-workers (>= %d jobs/s and >= %d× %s): %s %s jobs/s, %s %s (%s jobs/s): %s",
			fewWorkersTargetJobsPerS, fewWorkersTargetVsDef, riversut.NameDefault, rw.TenureSystem, fmtNum(*rw.Tenure),
			ratio, riversut.NameDefault, fmtPtr(rw.River), verdict))
	}
	if len(out) == 0 {
		out = append(out, fmt.Sprintf("few-workers (>= %d jobs/s and >= %d× %s): not evaluated (%s did not run or a side failed)",
			fewWorkersTargetJobsPerS, fewWorkersTargetVsDef, riversut.NameDefault, riversut.NameDefault))
	}
	return out
}

// The targets for the peak scenarios (Tenure at least this many times River, each at
// its own peak settings under one connection cap) and for bulk enqueue (at least this share of
// the server's own insert ceiling, and at least bulkTargetJobsPerS where that ceiling allows).
const (
	peakTargetRatio    = 1.2
	bulkTargetShare    = 80.0
	bulkTargetJobsPerS = 150_000
)

// peakTargets evaluates the peak target for every Tenure variant against River.
func peakTargets(rows []row) []string {
	var out []string
	for _, rw := range rows {
		var line string
		switch {
		case rw.Scenario == scenario.PeakBurnDown && rw.line == "throughput":
		case rw.Scenario == scenario.PeakSteady && rw.line == "completed":
		default:
			continue
		}
		line = fmt.Sprintf("%s %s (>= %.1f× %s): %s %s jobs/s, %s %s jobs/s", rw.Scenario, rw.line,
			peakTargetRatio, rw.RiverSystem, rw.TenureSystem, fmtPtr(rw.Tenure), rw.RiverSystem, fmtPtr(rw.River))
		switch {
		case rw.Ratio == nil:
			line += ": not evaluated (a side did not run or failed)"
		case *rw.Ratio >= peakTargetRatio:
			line += fmt.Sprintf(", %.2f×: met", *rw.Ratio)
		default:
			line += fmt.Sprintf(", %.2f×: not met", *rw.Ratio)
		}
		out = append(out, line)
	}
	return out
}

// bulkAPIOf is the Tenure bulk API a row's line suffix names (" (both InsertManyFast)", or
// " (InsertManyFast)" when River did not run), or "".
func bulkAPIOf(suffix string) string {
	for _, p := range []string{" (both ", " ("} {
		if rest, ok := strings.CutPrefix(suffix, p); ok {
			if api, _, ok := strings.Cut(rest, ")"); ok && !strings.HasPrefix(api, "River ") && !strings.HasPrefix(api, "vs ") {
				return api
			}
		}
	}
	return ""
}

// bulkTargets evaluates the bulk-enqueue target for each Tenure bulk API that inserted (one
// line per API, in the rows' order): its share of its own ceiling, and the absolute rate when
// the ceiling allows it (ceiling >= bulkTargetJobsPerS; otherwise only the share applies).
func bulkTargets(rows []row) []string {
	const shareLabel = "throughput as % of own ceiling"
	var out []string
	seen := map[string]bool{} // one evaluation per Tenure side (system and API)
	for _, share := range rows {
		if share.Scenario != scenario.BulkEnqueue || !strings.HasPrefix(share.line, shareLabel) {
			continue
		}
		suffix := strings.TrimPrefix(share.line, shareLabel)
		side := share.TenureSystem
		if api := bulkAPIOf(suffix); api != "" {
			side += " " + api
		}
		if seen[side] {
			continue // the same Tenure run against another River side
		}
		seen[side] = true
		var ceiling, rate *float64
		for _, rw := range rows {
			if rw.Scenario != scenario.BulkEnqueue || rw.TenureSystem != share.TenureSystem || rw.RiverSystem != share.RiverSystem ||
				!strings.HasSuffix(rw.line, suffix) {
				continue
			}
			switch strings.TrimSuffix(rw.line, suffix) {
			case "server's own insert ceiling, same table":
				ceiling = rw.Tenure
			case "throughput":
				rate = rw.Tenure
			}
		}
		if share.Tenure == nil || ceiling == nil || rate == nil {
			out = append(out, fmt.Sprintf("bulk-enqueue %s (>= %.0f%% of the server's own insert ceiling, and >= %d jobs/s if it allows): not evaluated (no ceiling measured)",
				side, bulkTargetShare, bulkTargetJobsPerS))
			continue
		}
		verdict := "met"
		if *share.Tenure < bulkTargetShare {
			verdict = "not met"
		}
		out = append(out, fmt.Sprintf("bulk-enqueue share (>= %.0f%% of the server's own insert ceiling): %s %s jobs/s = %.1f%% of %s rows/s: %s",
			bulkTargetShare, side, fmtNum(*rate), *share.Tenure, fmtNum(*ceiling), verdict))
		if *ceiling >= bulkTargetJobsPerS {
			verdict = "met"
			if *rate < bulkTargetJobsPerS {
				verdict = "not met"
			}
			out = append(out, fmt.Sprintf("bulk-enqueue rate (>= %d jobs/s; applies: the ceiling is %s rows/s): %s %s jobs/s: %s",
				bulkTargetJobsPerS, fmtNum(*ceiling), side, fmtNum(*rate), verdict))
		} else {
			out = append(out, fmt.Sprintf("bulk-enqueue rate (>= %d jobs/s): does not apply: the server's own ceiling is %s rows/s, below it; only the share applies",
				bulkTargetJobsPerS, fmtNum(*ceiling)))
		}
	}
	if len(out) == 0 {
		out = append(out, fmt.Sprintf("bulk-enqueue (>= %.0f%% of the server's own insert ceiling, and >= %d jobs/s if it allows): not evaluated (no ceiling measured)",
			bulkTargetShare, bulkTargetJobsPerS))
	}
	return out
}

// workersBySpec says which worker count each scenario used, e.g. "100 (burn-down, steady), 8 (few-workers)".
func workersBySpec(specs map[string]scenario.Spec) string {
	by := map[int][]string{}
	var counts []int
	for _, name := range scenario.All {
		s, ok := specs[name]
		if !ok || s.Workers == 0 {
			continue
		}
		if by[s.Workers] == nil {
			counts = append(counts, s.Workers)
		}
		by[s.Workers] = append(by[s.Workers], name)
	}
	var parts []string
	for _, n := range counts {
		parts = append(parts, fmt.Sprintf("%d (%s)", n, strings.Join(by[n], ", ")))
	}
	return strings.Join(parts, ", ")
}

func orderString(c config) string {
	if c.together {
		return strings.Join(c.systems, " + ") + " at the same time within each repetition (-together), each in its own database on the one server"
	}
	return strings.Join(c.systems, " → ") + " (in turn within each repetition; a system a scenario does not run is skipped)"
}

func fillRow(rw *row) {
	if len(rw.TenureRuns) > 0 {
		v := median(rw.TenureRuns)
		rw.Tenure = &v
	}
	if len(rw.RiverRuns) > 0 {
		v := median(rw.RiverRuns)
		rw.River = &v
	}
	if rw.Tenure == nil || rw.River == nil {
		return
	}
	t, r := *rw.Tenure, *rw.River
	num, den := t, r
	if !rw.HigherBetter {
		num, den = r, t
	}
	switch {
	case den == 0 && num == 0:
		one := 1.0
		rw.Ratio, rw.RatioNote = &one, "both zero"
	case den == 0:
		rw.RatioNote = "infinite: Tenure's value is 0"
		if rw.HigherBetter {
			rw.RatioNote = "infinite: River's value is 0"
		}
	default:
		v := num / den
		rw.Ratio = &v
	}
}

func readMachine() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	osName := runtime.GOOS + "/" + runtime.GOARCH
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				osName = strings.Trim(v, `"`) + ", " + osName
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		osName += ", kernel " + strings.TrimSpace(string(b))
	}
	m.OS = osName
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryGiB = int(math.Round(float64(kb) / (1 << 20)))
		}
	}
	return m
}

// fmtNum prints a number with about 3 significant figures.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 10:
		return fmt.Sprintf("%.2f", v)
	case a >= 1:
		return fmt.Sprintf("%.3f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmtNum(*v)
}

func fmtRatio(rw row) string {
	if rw.Ratio != nil {
		return fmt.Sprintf("%.2f", *rw.Ratio)
	}
	if rw.RatioNote != "" {
		return "∞"
	}
	return "—"
}

// header lists the settings that must accompany the numbers.
func (rep *report) header() []string {
	var out []string
	out = append(out, fmt.Sprintf("Tenure vs River — %s — %d CPU(s) %s, %s, %s",
		rep.Date, rep.Machine.CPUs, rep.Machine.Model, rep.Machine.GoVersion, rep.Machine.OS))
	out = append(out, fmt.Sprintf("PostgreSQL: %s", rep.Postgres.Version))
	var ss []string
	for _, k := range []string{"shared_buffers", "synchronous_commit", "fsync", "max_connections", "autovacuum"} {
		if v, ok := rep.Postgres.Settings[k]; ok {
			ss = append(ss, k+"="+v)
		}
	}
	out = append(out, "  settings: "+strings.Join(ss, ", "))
	mode := "full"
	if rep.Config.Quick {
		mode = "QUICK (BENCH_QUICK=1: shortened runs, not for publication)"
	}
	out = append(out, fmt.Sprintf("Mode: %s; %d repetition(s), medians; payload ≈ %d bytes; fresh database per run",
		mode, rep.Config.Repetitions, rep.Config.PayloadBytes))
	workers := "scenario worker count"
	if w := rep.Config.SystemConfig[riversut.Name]["MaxWorkers"]; w != "" {
		workers = w
	}
	syncCommit := rep.Postgres.Settings["synchronous_commit"]
	if syncCommit == "" {
		syncCommit = "?"
	}
	peakNote := ""
	for _, sc := range rep.Config.Scenarios {
		if sc.ConnCap > 0 {
			peakNote = " (peak scenarios: each side's own peak settings, listed under the scenario)"
		}
	}
	out = append(out, fmt.Sprintf("River settings: MaxWorkers=%s, everything else River's default; bulk API InsertManyFast unless noted; every River transaction commits with the server's synchronous_commit (%s)%s. Variants:",
		workers, syncCommit, peakNote))
	out = append(out, rep.variantLines("river")...)
	out = append(out, "Tenure settings: library defaults, Concurrency = scenario worker count; bulk API InsertMany (bulk-enqueue: InsertManyFast and InsertMany, each against River's API of the same name); its worker also opens its default private engine pool (worker.Config.EngineConns default) besides the shared pool"+peakNote+". Variants:")
	out = append(out, rep.variantLines("tenure")...)
	for _, name := range scenario.All {
		s, ok := rep.Config.Scenarios[name]
		if !ok {
			continue
		}
		out = append(out, "  "+name+": "+describeScenario(s))
		for _, sys := range rep.Config.Systems {
			if ps, ok := s.PeakSettings[sys]; ok {
				out = append(out, "    "+sys+" peak settings: "+describeSettings(ps))
			}
		}
	}
	out = append(out, "Latency: "+rep.Config.Latency)
	out = append(out, "Ratio: > 1 means Tenure is better (tenure/river for throughput, river/tenure for latency, CPU and dead tuples)")
	if cols := rep.tenureColumns(); len(cols) > 1 {
		out = append(out, fmt.Sprintf("  columns %s: the same comparison for the Tenure variant %s", strings.Join(cols[1:], ", "), strings.Join(cols[1:], ", ")))
	}
	for _, sys := range rep.Config.Systems {
		if family(sys) == "river" && sys != riversut.Name {
			out = append(out, fmt.Sprintf("  rows '(vs %s)': the River side is %s instead of %s", sys, sys, riversut.Name))
		}
	}
	return out
}

// variantLines describes the systems of a family that ran, and where they ran if not everywhere.
func (rep *report) variantLines(fam string) []string {
	var out []string
	for _, sys := range rep.Config.Systems {
		if family(sys) != fam {
			continue
		}
		line := "  " + sys + ": " + rep.Config.SystemDescriptions[sys]
		if ran := rep.Config.SystemScenarios[sys]; len(ran) < len(rep.Config.Scenarios) {
			line += " — runs in " + strings.Join(ran, ", ")
			if len(ran) == 0 {
				line += " no scenario"
			}
		}
		out = append(out, line)
	}
	return out
}

// tenureColumns returns the Tenure variants the tables show as columns, in run order.
func (rep *report) tenureColumns() []string {
	var cols []string
	for _, sys := range rep.Config.Systems {
		if family(sys) != "tenure" {
			continue
		}
		for _, rw := range rep.Results {
			if rw.TenureSystem == sys {
				cols = append(cols, sys)
				break
			}
		}
	}
	if len(cols) == 0 {
		cols = []string{tenuresut.Name}
	}
	return cols
}

// tableLine is one line of the text and markdown tables: one River side (named by the metric)
// against every Tenure variant (columns).
type tableLine struct {
	scenario, metric, unit string
	river                  *float64
	tenure                 map[string]row
}

// tableLines pivots the results: rows that differ only by their Tenure variant share a line.
func (rep *report) tableLines() []tableLine {
	var lines []tableLine
	index := map[[2]string]int{}
	for _, rw := range rep.Results {
		key := [2]string{rw.Scenario, rw.line}
		i, ok := index[key]
		if !ok {
			i = len(lines)
			index[key] = i
			lines = append(lines, tableLine{scenario: rw.Scenario, metric: rw.line, unit: rw.Unit, tenure: map[string]row{}})
		}
		if lines[i].river == nil {
			lines[i].river = rw.River
		}
		lines[i].tenure[rw.TenureSystem] = rw
	}
	return lines
}

// tableCells returns the header and the cells of every table line: tenure, river, ratio, then
// a value and a ratio per further Tenure variant.
func (rep *report) tableCells(markdown bool) (header []string, cells [][]string) {
	cols := rep.tenureColumns()
	first := cols[0]
	ratioHead := "ratio"
	if markdown {
		ratioHead = "Ratio (> 1 = Tenure better)"
	}
	if first == tenuresut.Name && markdown {
		first = "Tenure"
	}
	river := "river"
	scen, metric, unitHead := "scenario", "metric", "unit"
	if markdown {
		river, scen, metric, unitHead = "River", "Scenario", "Metric", "Unit"
	}
	header = []string{scen, metric, unitHead, first, river, ratioHead}
	for _, sys := range cols[1:] {
		header = append(header, sys, "ratio "+sys)
	}
	for _, l := range rep.tableLines() {
		r := []string{l.scenario, l.metric, l.unit}
		for i, sys := range cols {
			rw, ok := l.tenure[sys]
			val, ratio := "—", "—"
			if ok {
				val, ratio = fmtPtr(rw.Tenure), fmtRatio(rw)
			}
			if i == 0 {
				r = append(r, val, fmtPtr(l.river), ratio)
			} else {
				r = append(r, val, ratio)
			}
		}
		cells = append(cells, r)
	}
	return header, cells
}

func describeScenario(s scenarioConfig) string {
	var p []string
	if s.Workers > 0 {
		p = append(p, fmt.Sprintf("workers=%d", s.Workers))
	}
	if s.ConnCap > 0 {
		p = append(p, fmt.Sprintf("connection cap=%d (every connection of the process, both sides; each side's peak settings below)", s.ConnCap))
	} else {
		p = append(p, fmt.Sprintf("pool MaxConns=%d", s.PoolMaxConns))
	}
	if s.Ceiling {
		p = append(p, fmt.Sprintf("server's own insert ceiling measured in the same database (INSERT ... SELECT FROM generate_series into the same table, same batches; %d queue passes, each between two ceiling passes, table truncated before each pass; jobs/s and ceiling are the medians of their passes)", max(1, s.Rounds)))
	}
	if s.Inserters > 1 {
		p = append(p, fmt.Sprintf("%d inserting connections", s.Inserters))
	}
	if s.Jobs > 0 {
		p = append(p, fmt.Sprintf("jobs=%d", s.Jobs))
	}
	if s.DurationS > 0 {
		p = append(p, fmt.Sprintf("duration=%gs", s.DurationS))
	}
	if s.TimeLimitS > 0 {
		p = append(p, fmt.Sprintf("time limit=%gs", s.TimeLimitS))
	}
	if s.WarmupS > 0 {
		p = append(p, fmt.Sprintf("warm-up=%gs", s.WarmupS))
	}
	if s.Batch > 0 {
		p = append(p, fmt.Sprintf("batch=%d", s.Batch))
	}
	if s.Producers > 0 {
		p = append(p, fmt.Sprintf("producers=%d backlog cap=%d", s.Producers, s.BacklogCap))
	}
	if s.RatePerS > 0 {
		p = append(p, fmt.Sprintf("offered=%d jobs/s one insert per job", s.RatePerS))
	}
	if s.HandlerWorkMS > 0 {
		p = append(p, fmt.Sprintf("handler sleeps %gms", s.HandlerWorkMS))
	} else {
		p = append(p, "no-op handler")
	}
	if s.HoldXmin {
		p = append(p, "xmin held by an open transaction")
	}
	if s.Phases != "" {
		p = append(p, "phases: "+s.Phases)
	}
	return strings.Join(p, ", ")
}

// describeSettings lists settings as "k=v, ..." in key order.
func describeSettings(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ", ")
}

func (rep *report) text() string {
	var b strings.Builder
	for _, l := range rep.header() {
		b.WriteString(l + "\n")
	}
	b.WriteString("\n")
	cols, lines := rep.tableCells(false)
	cells := append([][]string{cols}, lines...)
	width := make([]int, len(cols))
	for _, r := range cells {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for ri, r := range cells {
		for i, c := range r {
			pad := width[i] - len([]rune(c))
			if i >= 3 { // numbers right-aligned
				b.WriteString(strings.Repeat(" ", pad) + c)
			} else {
				b.WriteString(c + strings.Repeat(" ", pad))
			}
			if i < len(r)-1 {
				b.WriteString("  ")
			}
		}
		b.WriteString("\n")
		if ri == 0 {
			total := 0
			for _, w := range width {
				total += w + 2
			}
			b.WriteString(strings.Repeat("-", total-2) + "\n")
		}
	}
	if len(rep.Targets) > 0 {
		b.WriteString("\nTargets:\n")
		for _, t := range rep.Targets {
			b.WriteString("  " + t + "\n")
		}
	}
	if len(rep.Failures) > 0 {
		b.WriteString("\nFAILED RUNS:\n")
		for _, f := range rep.Failures {
			b.WriteString("  " + f + "\n")
		}
	}
	if len(rep.Interference) > 0 {
		b.WriteString("\nCPU used by unrelated processes during the runs (share of the machine, median; high values make the numbers noisy):\n")
		for _, l := range rep.Interference {
			b.WriteString("  " + l + "\n")
		}
	}
	if len(rep.Notes) > 3 {
		b.WriteString("\nNotes:\n")
		for _, n := range rep.Notes[3:] {
			b.WriteString("  " + n + "\n")
		}
	}
	return b.String()
}

func (rep *report) markdown() string {
	var b strings.Builder
	b.WriteString("# Tenure vs River\n\n")
	for _, l := range rep.header() {
		b.WriteString("- " + strings.TrimSpace(l) + "\n")
	}
	header, lines := rep.tableCells(true)
	b.WriteString("\n| " + strings.Join(header, " | ") + " |\n|---|---|---|" + strings.Repeat("---:|", len(header)-3) + "\n")
	for _, l := range lines {
		b.WriteString("| " + strings.Join(l, " | ") + " |\n")
	}
	if len(rep.Targets) > 0 {
		b.WriteString("\nTargets:\n\n")
		for _, t := range rep.Targets {
			b.WriteString("- " + t + "\n")
		}
	}
	if len(rep.Failures) > 0 {
		b.WriteString("\n**Failed runs:**\n\n")
		for _, f := range rep.Failures {
			b.WriteString("- " + f + "\n")
		}
	}
	if len(rep.Interference) > 0 {
		b.WriteString("\nCPU used by unrelated processes during the runs (share of the machine, median; high values make the numbers noisy):\n\n")
		for _, l := range rep.Interference {
			b.WriteString("- " + l + "\n")
		}
	}
	b.WriteString("\nNotes:\n\n")
	for _, n := range rep.Notes {
		b.WriteString("- " + n + "\n")
	}
	if len(rep.Statements) > 0 {
		b.WriteString("\n## Statements (pg_stat_statements, first repetition, measured interval)\n")
		for _, rs := range rep.Statements {
			fmt.Fprintf(&b, "\n%s — %s (%d jobs):\n\n| statement | calls | calls / 1k jobs | mean µs | rows / call | blocks / call | WAL bytes / call | full-page images / call |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
				rs.Scenario, rs.System, rs.Jobs)
			for _, st := range rs.Statements {
				per1k := 0.0
				if rs.Jobs > 0 {
					per1k = float64(st.Calls) / (float64(rs.Jobs) / 1000)
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", strings.ReplaceAll(st.Query, "|", "\\|"), st.Calls, fmtNum(per1k),
					fmtNum(st.MeanUs), fmtNum(float64(st.Rows)/float64(st.Calls)), fmtNum(float64(st.SharedBlks)/float64(st.Calls)),
					fmtNum(float64(st.WALBytes)/float64(st.Calls)), fmtNum(float64(st.WALFPI)/float64(st.Calls)))
			}
		}
	}
	fmt.Fprintf(&b, "\nGenerated by `make bench-compare` (bench/cmd/compare) in %.0f s. Raw per-repetition values are in latest.json.\n", rep.DurationS)
	return b.String()
}
