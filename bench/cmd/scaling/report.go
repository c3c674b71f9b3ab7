package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/bench/internal/svgplot"
)

// Machine describes the host.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPU       string `json:"cpu"`
	Memory    string `json:"memory"`
	GoVersion string `json:"go"`
	OS        string `json:"os"`
}

// Sweep is one swept parameter and its points.
type Sweep struct {
	Name        string  `json:"name"`
	Param       string  `json:"param"`
	Unit        string  `json:"unit"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Points      []Point `json:"points"`
}

// Report is the whole run (latest-scaling.json).
type Report struct {
	Started   time.Time         `json:"started"`
	DurationS float64           `json:"duration_s"`
	Quick     bool              `json:"quick"`
	Machine   Machine           `json:"machine"`
	Server    pgutil.ServerInfo `json:"server"`
	Settings  map[string]string `json:"settings"`
	Sweeps    []*Sweep          `json:"sweeps"`
	Soak      *Soak             `json:"soak,omitempty"`
	Failures  []string          `json:"failures,omitempty"`
	Notes     []string          `json:"notes,omitempty"`
}

// setSweep adds sw, replacing a sweep of the same name (from -merge), in run order.
func (r *Report) setSweep(sw *Sweep) {
	for i, s := range r.Sweeps {
		if s.Name == sw.Name {
			r.Sweeps[i] = sw
			return
		}
	}
	r.Sweeps = append(r.Sweeps, sw)
	order := map[string]int{}
	for i, n := range AllSweeps {
		order[n] = i
	}
	sort.SliceStable(r.Sweeps, func(i, j int) bool { return order[r.Sweeps[i].Name] < order[r.Sweeps[j].Name] })
}

// figures returns the plots: one per sweep (throughput; claim latency) and the soak's.
func (r *Report) figures() map[string]svgplot.Figure {
	note := fmt.Sprintf("Tenure, %d CPUs (shared, noisy), %s, run %s", r.Machine.CPUs, shortVersion(r.Server.Version), r.Started.Format("2006-01-02 15:04 UTC"))
	out := map[string]svgplot.Figure{}
	for _, sw := range r.Sweeps {
		if len(sw.Points) == 0 {
			continue
		}
		var thr, p99, p50, srv, wp99, pgc, bc, jpc svgplot.Series
		jpc.Name = "jobs claimed per claim statement"
		pgc.Name, bc.Name = "postgres", "bench process (worker + monitor)"
		thr.Name, p99.Name, p50.Name, srv.Name, wp99.Name = "jobs/s", "claim p99 (client)", "claim p50 (client)", "claim mean (server, pg_stat_statements)", "claim p99 incl. pool wait (worker.Stats)"
		for _, p := range sw.Points {
			x := float64(p.X)
			if x <= 0 {
				x = float64(p.X) // 0 finished rows: plotted at the first decade below (see below)
			}
			thr.Points = append(thr.Points, svgplot.Point{X: x, Y: p.JobsPerS})
			pgc.Points = append(pgc.Points, svgplot.Point{X: x, Y: p.PGCPUPer1k})
			jpc.Points = append(jpc.Points, svgplot.Point{X: x, Y: p.JobsPerClaim})
			bc.Points = append(bc.Points, svgplot.Point{X: x, Y: p.CPUPer1k})
			p99.Points = append(p99.Points, svgplot.Point{X: x, Y: p.Claim.P99Ms})
			p50.Points = append(p50.Points, svgplot.Point{X: x, Y: p.Claim.P50Ms})
			wp99.Points = append(wp99.Points, svgplot.Point{X: x, Y: p.WorkerClaimP99Ms})
			if p.Server != nil {
				srv.Points = append(srv.Points, svgplot.Point{X: x, Y: p.Server.MeanUs / 1000})
			}
		}
		xl := sw.Param + " (" + sw.Unit + ")"
		// A sweep that starts at 0 (no finished rows) cannot sit on a log axis: place 0 one
		// decade below the next point and say so in the label.
		if sw.Points[0].X == 0 && len(sw.Points) > 1 {
			zx := float64(sw.Points[1].X) / 10
			for _, s := range []*svgplot.Series{&thr, &p99, &p50, &wp99, &srv, &pgc, &bc, &jpc} {
				for i := range s.Points {
					if s.Points[i].X == 0 {
						s.Points[i].X = zx
					}
				}
			}
			xl += "; 0 drawn at " + svgplot.Human(zx)
		}
		lat := []svgplot.Series{p99, p50, wp99}
		if len(srv.Points) > 0 {
			lat = append(lat, srv)
		}
		out["scaling-"+sw.Name+".svg"] = svgplot.Figure{
			Title: "How cost grows: " + strings.ToLower(sw.Title), Note: note,
			Panels: []svgplot.Panel{
				{Title: "Throughput (burn-down)", XLabel: xl, YLabel: "jobs/s", LogX: true, YZero: true, Series: []svgplot.Series{thr}},
				{Title: "Claim statement latency", XLabel: xl, YLabel: "ms", LogX: true, LogY: true, Series: lat},
				{Title: "CPU per 1,000 jobs", XLabel: xl, YLabel: "CPU seconds", LogX: true, YZero: true, Series: []svgplot.Series{pgc, bc}},
				{Title: "Claim batch size", XLabel: xl, YLabel: "jobs per claim", LogX: true, YZero: true, Series: []svgplot.Series{jpc}},
			},
		}
	}
	if sk := r.Soak; sk != nil && len(sk.Samples) > 0 {
		mb := func(b int64) float64 { return float64(b) / (1 << 20) }
		min := func(s Sample) float64 { return s.T / 60 }
		sizes := []svgplot.Series{{Name: "table (heap)"}, {Name: "table + indexes + TOAST"}}
		idxNames := map[string]bool{}
		for _, s := range sk.Samples {
			for n, b := range s.Sizes.Indexes {
				if b > 16384 {
					idxNames[n] = true
				}
			}
		}
		var idx []string
		for n := range idxNames {
			idx = append(idx, n)
		}
		sort.Strings(idx)
		for _, n := range idx {
			sizes = append(sizes, svgplot.Series{Name: n})
		}
		tuples := []svgplot.Series{{Name: "dead tuples"}, {Name: "live tuples"}}
		ready := []svgplot.Series{{Name: "ready backlog"}}
		load := []svgplot.Series{{Name: "1-minute load average (2 CPUs; other agents included)"}}
		rate := []svgplot.Series{{Name: "completed/s"}, {Name: "offered/s"}}
		lat := []svgplot.Series{{Name: "claim p99 (client)"}, {Name: "claim p50 (client)"}}
		for _, s := range sk.Samples {
			t := min(s)
			sizes[0].Points = append(sizes[0].Points, svgplot.Point{X: t, Y: mb(s.Sizes.TableBytes)})
			sizes[1].Points = append(sizes[1].Points, svgplot.Point{X: t, Y: mb(s.Sizes.TotalBytes)})
			for i, n := range idx {
				sizes[2+i].Points = append(sizes[2+i].Points, svgplot.Point{X: t, Y: mb(s.Sizes.Indexes[n])})
			}
			tuples[0].Points = append(tuples[0].Points, svgplot.Point{X: t, Y: float64(s.Sizes.Dead)})
			tuples[1].Points = append(tuples[1].Points, svgplot.Point{X: t, Y: float64(s.Sizes.Live)})
			ready[0].Points = append(ready[0].Points, svgplot.Point{X: t, Y: float64(s.Ready)})
			if f := strings.Fields(s.Load); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					load[0].Points = append(load[0].Points, svgplot.Point{X: t, Y: v})
				}
			}
			rate[0].Points = append(rate[0].Points, svgplot.Point{X: t, Y: s.CompletedPS})
			rate[1].Points = append(rate[1].Points, svgplot.Point{X: t, Y: s.OfferedPerS})
			lat[0].Points = append(lat[0].Points, svgplot.Point{X: t, Y: s.Claim.P99Ms})
			lat[1].Points = append(lat[1].Points, svgplot.Point{X: t, Y: s.Claim.P50Ms})
		}
		out["scaling-soak.svg"] = svgplot.Figure{
			Title: fmt.Sprintf("Soak: %.0f%% of capacity (%.0f of %.0f jobs/s), autovacuum on, retention %s", sk.Load*100, sk.OfferedPerS, sk.CapacityPerS, time.Duration(sk.RetentionS*float64(time.Second))),
			Note:  note, Cols: 2,
			Panels: []svgplot.Panel{
				{Title: "Queue table size", XLabel: "minutes", YLabel: "MB", YZero: true, Series: sizes[:2]},
				{Title: "Index sizes", XLabel: "minutes", YLabel: "MB", YZero: true, Series: sizes[2:]},
				{Title: "Tuples (pg_stat_user_tables)", XLabel: "minutes", YLabel: "rows", YZero: true, Series: tuples},
				{Title: "Ready backlog", XLabel: "minutes", YLabel: "jobs", YZero: true, Series: ready},
				{Title: "Throughput", XLabel: "minutes", YLabel: "jobs/s", YZero: true, Series: rate},
				{Title: "Claim statement latency per interval", XLabel: "minutes", YLabel: "ms", YZero: true, Series: lat},
				{Title: "Machine load", XLabel: "minutes", YLabel: "runnable tasks", YZero: true, Series: load},
			},
		}
	}
	return out
}

func shortVersion(v string) string {
	f := strings.Fields(v)
	if len(f) >= 2 {
		return f[0] + " " + f[1]
	}
	return v
}

// writeReport writes latest-scaling.{json,md} and latest-scaling-*.svg into the output
// directory and, with -publish, the dated report and the plots under their published names.
func writeReport(c *config, r *Report) error {
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	js = append(js, '\n')
	md := []byte(r.markdown())
	figs := r.figures()
	files := map[string][]byte{"latest-scaling.json": js, "latest-scaling.md": md}
	for name, f := range figs {
		files["latest-"+name] = f.Render()
	}
	if c.publish != "" {
		files[c.publish+"-scaling.json"] = js
		files[c.publish+"-scaling.md"] = md
		for name, f := range figs {
			files[name] = f.Render()
		}
	}
	for name, b := range files {
		path := filepath.Join(c.outDir, name)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return nil
}

func f1(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func mbs(b int64) string { return f1(float64(b) / (1 << 20)) }

// markdown renders the report.
func (r *Report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Tenure: how cost grows\n\n")
	fmt.Fprintf(&b, "- Run %s, %.0f s in all%s\n", r.Started.Format(time.RFC3339), r.DurationS, map[bool]string{true: " (**quick mode: tiny sweeps, not for publication**)", false: ""}[r.Quick])
	fmt.Fprintf(&b, "- Machine: %d CPU(s) %s, %s, %s %s — shared with other agents' tests and benchmarks: timings are noisy; the 1/5/15-min load average is given with every point\n",
		r.Machine.CPUs, r.Machine.CPU, r.Machine.Memory, r.Machine.GoVersion, r.Machine.OS)
	fmt.Fprintf(&b, "- PostgreSQL: %s\n", r.Server.Version)
	var keys []string
	for k := range r.Server.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var kv []string
	for _, k := range keys {
		kv = append(kv, k+"="+r.Server.Settings[k])
	}
	fmt.Fprintf(&b, "- Server settings: %s\n", strings.Join(kv, ", "))
	keys = keys[:0]
	for k := range r.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %s\n", k, r.Settings[k])
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	b.WriteString("\nColumns: **jobs/s** = jobs succeeded (fenced finish written) in the measured slice / time from worker start; " +
		"**claim p50/p99** = the claim statement's latency as the client sees it (pgx tracer, no pool wait); " +
		"**worker p99** = worker.Stats().ClaimP99 (includes the wait for an engine connection); " +
		"**server mean** = pg_stat_statements mean execution time of the claim; **blocks/claim** = shared blocks hit+read per claim (server); " +
		"**EXPLAIN** = EXPLAIN (ANALYZE, BUFFERS) of the worker's last claim re-run after the slice (rolled back); " +
		"**pg CPU** = server CPU seconds per 1,000 jobs; sizes after the slice.\n")
	for _, sw := range r.Sweeps {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", sw.Title, sw.Description)
		fmt.Fprintf(&b, "| %s | jobs/s | claim p50 ms | claim p99 ms | worker p99 ms | claims | jobs/claim | server mean µs | blocks/claim | EXPLAIN ms | EXPLAIN buffers | pg CPU s/1k | heap MB | jobs_ready_idx MB | pkey MB | load before → after |\n", sw.Param)
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|\n")
		for _, p := range sw.Points {
			srvMean, blocks := "—", "—"
			if p.Server != nil && p.Server.Calls > 0 {
				srvMean = f1(p.Server.MeanUs)
				blocks = f1(float64(p.Server.SharedBlks) / float64(p.Server.Calls))
			}
			exMs, exBuf := "—", "—"
			if p.Explain != nil {
				exMs, exBuf = f1(p.Explain.ExecMs), p.Explain.Buffers
			}
			jps := f1(p.JobsPerS)
			if p.Error != "" {
				jps += " (" + p.Error + ")"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s → %s |\n",
				svgplot.Human(float64(p.X)), jps, f1(p.Claim.P50Ms), f1(p.Claim.P99Ms), f1(p.WorkerClaimP99Ms), p.Claim.Count,
				f1(p.JobsPerClaim), srvMean, blocks, exMs, exBuf, f1(p.PGCPUPer1k), mbs(p.Sizes.TableBytes),
				mbs(p.Sizes.Indexes["jobs_ready_idx"]), mbs(p.Sizes.Indexes["jobs_pkey"]), p.LoadBefore, p.LoadAfter)
		}
		var extra []string
		for _, p := range sw.Points {
			if p.EngineConns > 0 && (p.Shape.Queues > 1 || p.Shape.Slots != sw.Points[0].Shape.Slots) {
				extra = append(extra, fmt.Sprintf("%s: %d queue(s) × Concurrency %d, engine pool %d connections, preload %.0f s",
					svgplot.Human(float64(p.X)), p.Shape.Queues, p.PerQueueConcurrency, p.EngineConns, p.PreloadS))
			} else {
				extra = append(extra, fmt.Sprintf("%s: engine pool %d connections, preload %.0f s", svgplot.Human(float64(p.X)), p.EngineConns, p.PreloadS))
			}
		}
		fmt.Fprintf(&b, "\n%s.\n", strings.Join(extra, "; "))
		fmt.Fprintf(&b, "\nPlot: `scaling-%s.svg`.\n", sw.Name)
	}
	if sk := r.Soak; sk != nil {
		fmt.Fprintf(&b, "\n## Soak\n\n")
		if sk.CapacityFreshPerS > 0 {
			fmt.Fprintf(&b, "Capacity on a fresh table: %.0f jobs/s. ", sk.CapacityFreshPerS)
		}
		capText := fmt.Sprintf("Capacity: %.0f jobs/s completed in a saturated run of the same workload (inserts and claims on the one machine; claim p99 %.2f ms; load %s)%s",
			sk.CapacityPerS, sk.CapacityClaim.P99Ms, sk.CapacityLoad, retainedNote(sk))
		if sk.CapacityLoad == "given" {
			capText = fmt.Sprintf("Capacity: %.0f jobs/s, given (-soak-capacity, an earlier run's measurement), not measured in this run", sk.CapacityPerS)
		}
		fmt.Fprintf(&b, "%s. Then %.0f%% of it, %.0f jobs/s offered by two producers (InsertMany every 10 ms), for %.0f s on a fresh database, %d slots, "+
			"FinishedRetention %s (pruned every minute), autovacuum on; sampled every %.0f s. Inserted %d, succeeded %d, pruned %d; claim over the whole soak: p50 %.2f ms, p99 %.2f ms, max %.1f ms (%d claims).\n",
			capText, sk.Load*100, sk.OfferedPerS, sk.DurationS, sk.Slots,
			time.Duration(sk.RetentionS*float64(time.Second)), sk.SampleEveryS, sk.Inserted, sk.Succeeded, sk.Pruned,
			sk.Claim.P50Ms, sk.Claim.P99Ms, sk.Claim.MaxMs, sk.Claim.Count)
		if sk.Error != "" {
			fmt.Fprintf(&b, "\n**Error:** %s\n", sk.Error)
		}
		if len(sk.Slopes) > 0 {
			b.WriteString("\nTrends (least-squares slope per 10 minutes; first/last fifth = mean of the window's first and last fifth of samples):\n\n")
			b.WriteString("| metric | unit | window | mean | slope / 10 min | slope / mean | first fifth | last fifth |\n|---|---|---|---:|---:|---:|---:|---:|\n")
			for _, s := range sk.Slopes {
				fmt.Fprintf(&b, "| %s | %s | %s (%.0f–%.0f s) | %s | %s | %+.1f%% | %s | %s |\n", s.Metric, s.Unit, s.Window, s.From, s.To,
					f1(s.Mean), signed(s.PerTenMin), s.RelPerTenMin*100, f1(s.First), f1(s.Last))
			}
		}
		b.WriteString("\nSamples:\n\n| t s | completed/s | claim p50 ms | claim p99 ms | claims | ready | heap MB | total MB | jobs_ready_idx MB | jobs_pkey MB | jobs_finished_idx MB | dead | live | autovacuums | load |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, s := range sk.Samples {
			fmt.Fprintf(&b, "| %.0f | %.0f | %s | %s | %d | %d | %s | %s | %s | %s | %s | %d | %d | %d | %s |\n", s.T, s.CompletedPS,
				f1(s.Claim.P50Ms), f1(s.Claim.P99Ms), s.Claim.Count, s.Ready, mbs(s.Sizes.TableBytes), mbs(s.Sizes.TotalBytes),
				mbs(s.Sizes.Indexes["jobs_ready_idx"]), mbs(s.Sizes.Indexes["jobs_pkey"]), mbs(s.Sizes.Indexes["jobs_finished_idx"]),
				s.Sizes.Dead, s.Sizes.Live, s.Sizes.Autovacuum, s.Load)
		}
		b.WriteString("\nPlot: `scaling-soak.svg`.\n")
	}
	if len(r.Failures) > 0 {
		b.WriteString("\n## Failures\n\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

func signed(v float64) string {
	if v >= 0 {
		return "+" + f1(v)
	}
	return "-" + f1(-v)
}

// retainedNote says what the soak's capacity run held (a report from before the retained-table
// capacity has none).
func retainedNote(sk *Soak) string {
	if sk.RetainedRows == 0 {
		return ""
	}
	return fmt.Sprintf(", on a table holding %d succeeded rows finished over the last %s and pruned at that retention: what the soak retains at %.0f%% of the fresh capacity",
		sk.RetainedRows, time.Duration(sk.RetentionS*float64(time.Second)), sk.Load*100)
}
