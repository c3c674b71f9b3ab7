package main

import (
	"strings"
	"testing"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/bench/internal/scenario"
)

func TestMedian(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Fatalf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("median even = %v", m)
	}
}

func TestRatioOrientation(t *testing.T) {
	hb := row{HigherBetter: true, TenureRuns: []float64{200}, RiverRuns: []float64{100}}
	fillRow(&hb)
	lb := row{HigherBetter: false, TenureRuns: []float64{5}, RiverRuns: []float64{10}}
	fillRow(&lb)
	if *hb.Ratio != 2 || *lb.Ratio != 2 {
		t.Fatalf("ratios %v %v, want 2 and 2 (Tenure better in both)", *hb.Ratio, *lb.Ratio)
	}
	zero := row{HigherBetter: false, TenureRuns: []float64{0}, RiverRuns: []float64{10}}
	fillRow(&zero)
	if zero.Ratio != nil || zero.RatioNote == "" || fmtRatio(zero) != "∞" {
		t.Fatalf("zero denominator: %+v", zero)
	}
	missing := row{HigherBetter: true, TenureRuns: []float64{1}}
	fillRow(&missing)
	if missing.Ratio != nil || missing.River != nil || fmtRatio(missing) != "—" {
		t.Fatalf("missing side: %+v", missing)
	}
}

func TestBuildReportRows(t *testing.T) {
	c := config{reps: 2, scenarios: []string{scenario.BurnDown, scenario.BulkEnqueue}, systems: []string{"tenure", "river"}, payload: 256}
	specs := map[string]scenario.Spec{}
	for _, s := range c.scenarios {
		sp, err := c.plan(s)
		if err != nil {
			t.Fatal(err)
		}
		specs[s] = sp
	}
	res := func(jobsPerS, benchCPU float64) *scenario.Result {
		return &scenario.Result{Metrics: map[string]float64{scenario.MJobsPerS: jobsPerS}, Jobs: 2000,
			BenchCPU: benchCPU, PGCPU: 1, PGCPUValid: true,
			WAL: pgutil.WAL{Bytes: int64(benchCPU * 4e6), FPI: int64(benchCPU * 100), Checkpoints: 1}, WALValid: true}
	}
	results := map[runKey][]*scenario.Result{
		{scenario.BurnDown, unit{System: "tenure"}}:              {res(100, 1), res(300, 1)},
		{scenario.BurnDown, unit{System: "river"}}:               {res(100, 2), res(100, 2)},
		{scenario.BulkEnqueue, unit{"tenure", "InsertManyFast"}}: {res(10, 1)},
		{scenario.BulkEnqueue, unit{"tenure", "InsertMany"}}:     {res(10, 1)},
		{scenario.BulkEnqueue, unit{"river", "InsertManyFast"}}:  {res(20, 1)},
		{scenario.BulkEnqueue, unit{"river", "InsertMany"}}:      {res(5, 1)},
	}
	rep := buildReport(c, specs, pgutil.ServerInfo{Settings: map[string]string{}}, results, nil, nil)
	find := func(scen, metric string) row {
		for _, r := range rep.Results {
			if r.Scenario == scen && r.Metric == metric {
				return r
			}
		}
		t.Fatalf("no row %s/%s in %+v", scen, metric, rep.Results)
		return row{}
	}
	if r := find(scenario.BurnDown, "throughput"); *r.Tenure != 200 || *r.River != 100 || *r.Ratio != 2 {
		t.Fatalf("burn-down throughput row %+v", r)
	}
	if r := find(scenario.BurnDown, "bench process CPU"); *r.Tenure != 0.5 || *r.River != 1 || *r.Ratio != 2 {
		t.Fatalf("burn-down CPU row %+v", r)
	}
	// WAL per 1,000 jobs: 4 MB / 2 and 8 MB / 2; full-page images 100 / 2 and 200 / 2.
	if r := find(scenario.BurnDown, "WAL written"); *r.Tenure != 2 || *r.River != 4 || *r.Ratio != 2 {
		t.Fatalf("burn-down WAL row %+v", r)
	}
	if r := find(scenario.BurnDown, "WAL full-page images"); *r.Tenure != 50 || *r.River != 100 {
		t.Fatalf("burn-down FPI row %+v", r)
	}
	if r := find(scenario.BurnDown, "checkpoints started in the interval"); *r.Tenure != 1 {
		t.Fatalf("burn-down checkpoints row %+v", r)
	}
	if r := find(scenario.BulkEnqueue, "throughput (both InsertManyFast)"); *r.Ratio != 0.5 {
		t.Fatalf("bulk fast row %+v", r)
	}
	if r := find(scenario.BulkEnqueue, "throughput (both InsertMany)"); *r.Ratio != 2 {
		t.Fatalf("bulk returning row %+v", r)
	}
	if md := rep.markdown(); !strings.Contains(md, "| burn-down | throughput | jobs/s | 200.0 | 100.0 | 2.00 |") {
		t.Fatalf("markdown:\n%s", md)
	}
}

func TestUnitsPerScenario(t *testing.T) {
	def := config{systems: defaultSystems, systemsDefault: true}
	labels := func(c config, scen string) string {
		var out []string
		for _, u := range c.units(scen) {
			out = append(out, u.label())
		}
		return strings.Join(out, ",")
	}
	for scen, want := range map[string]string{
		scenario.BurnDown:    "tenure,tenure-async,river",
		scenario.Latency:     "tenure,tenure-async,river,river-default",
		scenario.FewWorkers:  "tenure,tenure-async,river,river-default",
		scenario.BulkEnqueue: "tenure/InsertManyFast,tenure/InsertMany,river/InsertManyFast,river/InsertMany",
	} {
		if got := labels(def, scen); got != want {
			t.Errorf("default systems, %s: units %s, want %s", scen, got, want)
		}
	}
	explicit := config{systems: []string{"tenure", "river", "river-default"}}
	if got := labels(explicit, scenario.BurnDown); got != "tenure,river,river-default" {
		t.Errorf("explicit river-default in burn-down: %s", got)
	}
	// A worker variant runs bulk-enqueue when the system it varies is not selected.
	alone := config{systems: []string{"tenure-async", "river-default"}}
	if got := labels(alone, scenario.BulkEnqueue); got != "tenure-async,river-default" {
		t.Errorf("variants alone in bulk-enqueue: %s", got)
	}
}

func TestBuildReportVariants(t *testing.T) {
	c := config{reps: 1, scenarios: []string{scenario.FewWorkers, scenario.BulkEnqueue},
		systems: defaultSystems, systemsDefault: true, payload: 256}
	specs := map[string]scenario.Spec{}
	for _, s := range c.scenarios {
		sp, err := c.plan(s)
		if err != nil {
			t.Fatal(err)
		}
		specs[s] = sp
	}
	res := func(key string, v float64) *scenario.Result {
		return &scenario.Result{Metrics: map[string]float64{key: v}, Jobs: 1000, BenchCPU: 1, PGCPU: 1, PGCPUValid: true}
	}
	results := map[runKey][]*scenario.Result{
		{scenario.FewWorkers, unit{System: "tenure"}}:            {res(scenario.MCompletedPerS, 3000)},
		{scenario.FewWorkers, unit{System: "tenure-async"}}:      {res(scenario.MCompletedPerS, 2000)},
		{scenario.FewWorkers, unit{System: "river"}}:             {res(scenario.MCompletedPerS, 1000)},
		{scenario.FewWorkers, unit{System: "river-default"}}:     {res(scenario.MCompletedPerS, 100)},
		{scenario.BulkEnqueue, unit{"tenure", "InsertManyFast"}}: {res(scenario.MJobsPerS, 10)},
		{scenario.BulkEnqueue, unit{"river", "InsertManyFast"}}:  {res(scenario.MJobsPerS, 20)},
		{scenario.BulkEnqueue, unit{"river", "InsertMany"}}:      {res(scenario.MJobsPerS, 5)},
	}
	rep := buildReport(c, specs, pgutil.ServerInfo{Settings: map[string]string{}}, results, nil, nil)
	find := func(scen, metric string) row {
		for _, r := range rep.Results {
			if r.Scenario == scen && r.Metric == metric {
				return r
			}
		}
		t.Fatalf("no row %s/%s", scen, metric)
		return row{}
	}
	for metric, want := range map[string]struct {
		tenure, river, ratio float64
		ts, rs               string
	}{
		"completed":                                   {3000, 1000, 3, "tenure", "river"},
		"completed [tenure-async]":                    {2000, 1000, 2, "tenure-async", "river"},
		"completed (vs river-default)":                {3000, 100, 30, "tenure", "river-default"},
		"completed [tenure-async] (vs river-default)": {2000, 100, 20, "tenure-async", "river-default"},
	} {
		r := find(scenario.FewWorkers, metric)
		if *r.Tenure != want.tenure || *r.River != want.river || *r.Ratio != want.ratio ||
			r.TenureSystem != want.ts || r.RiverSystem != want.rs {
			t.Errorf("row %q = %+v, want %+v", metric, r, want)
		}
	}
	for _, r := range rep.Results {
		if r.Scenario == scenario.BulkEnqueue && (r.TenureSystem != "tenure" || r.RiverSystem != "river") {
			t.Errorf("bulk-enqueue row of a worker variant: %+v", r)
		}
	}
	md := rep.markdown()
	for _, want := range []string{
		"| Scenario | Metric | Unit | Tenure | River | Ratio (> 1 = Tenure better) | tenure-async | ratio tenure-async |",
		"| few-workers | completed | jobs/s | 3000 | 1000 | 3.00 | 2000 | 2.00 |",
		"| few-workers | completed (vs river-default) | jobs/s | 3000 | 100.0 | 30.00 | 2000 | 20.00 |",
		"| bulk-enqueue | throughput (both InsertManyFast) | jobs/s | 10.00 | 20.00 | 0.50 | — | — |",
		"river-default: River's client defaults",
		"(100ms and 1s) — runs in few-workers",
		"tenure-async: tenure with worker.Config{AsynchronousCommit: true}",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// Two few-workers lines, then bulk-enqueue's (one per Tenure bulk API), not evaluated without
	// a measured ceiling.
	if len(rep.Targets) != 4 || !strings.Contains(rep.Targets[0], "tenure 3000 jobs/s, 30.0× river-default (100.0 jobs/s): met") ||
		!strings.Contains(rep.Targets[2], "bulk-enqueue") || !strings.Contains(rep.Targets[2], "not evaluated") ||
		!strings.Contains(rep.Targets[1], "tenure-async 2000 jobs/s, 20.0× river-default (100.0 jobs/s): not met") {
		t.Errorf("targets %q", rep.Targets)
	}
}

func TestPeakAndBulkTargets(t *testing.T) {
	c := config{reps: 1, scenarios: []string{scenario.PeakBurnDown, scenario.PeakSteady, scenario.BulkEnqueue},
		systems: []string{"tenure", "river"}, payload: 256, connCap: 20, ceiling: true}
	specs := map[string]scenario.Spec{}
	for _, s := range c.scenarios {
		sp, err := c.plan(s)
		if err != nil {
			t.Fatal(err)
		}
		if s != scenario.BulkEnqueue && (!sp.Peak || sp.ConnCap != 20 || sp.MaxConns != 0) {
			t.Fatalf("%s spec %+v: want peak, cap 20, pool left to the driver", s, sp)
		}
		specs[s] = sp
	}
	res := func(m map[string]float64, settings map[string]string) *scenario.Result {
		return &scenario.Result{Metrics: m, Jobs: 1000, Settings: settings}
	}
	results := map[runKey][]*scenario.Result{
		{scenario.PeakBurnDown, unit{System: "tenure"}}: {res(map[string]float64{scenario.MJobsPerS: 1300, scenario.MConnsMax: 9}, map[string]string{"Concurrency": "500"})},
		{scenario.PeakBurnDown, unit{System: "river"}}:  {res(map[string]float64{scenario.MJobsPerS: 1000, scenario.MConnsMax: 5}, map[string]string{"MaxWorkers": "2000"})},
		{scenario.PeakSteady, unit{System: "tenure"}}:   {res(map[string]float64{scenario.MCompletedPerS: 1100}, nil)},
		{scenario.PeakSteady, unit{System: "river"}}:    {res(map[string]float64{scenario.MCompletedPerS: 1000}, nil)},
		{scenario.BulkEnqueue, unit{"tenure", "InsertManyFast"}}: {res(map[string]float64{scenario.MJobsPerS: 160_000,
			scenario.MCeilingPerS: 190_000, scenario.MOfCeiling: 100 * 160_000.0 / 190_000}, nil)},
		{scenario.BulkEnqueue, unit{"tenure", "InsertMany"}}: {res(map[string]float64{scenario.MJobsPerS: 100_000,
			scenario.MCeilingPerS: 200_000, scenario.MOfCeiling: 50}, nil)},
		{scenario.BulkEnqueue, unit{"river", "InsertManyFast"}}: {res(map[string]float64{scenario.MJobsPerS: 50_000}, nil)},
		{scenario.BulkEnqueue, unit{"river", "InsertMany"}}:     {res(map[string]float64{scenario.MJobsPerS: 40_000}, nil)},
	}
	rep := buildReport(c, specs, pgutil.ServerInfo{Settings: map[string]string{}}, results, nil, nil)
	want := []string{
		"peak-burn-down throughput (>= 1.2× river): tenure 1300 jobs/s, river 1000 jobs/s, 1.30×: met",
		"peak-steady completed (>= 1.2× river): tenure 1100 jobs/s, river 1000 jobs/s, 1.10×: not met",
		"bulk-enqueue share (>= 80% of the server's own insert ceiling): tenure InsertManyFast 160000 jobs/s = 84.2% of 190000 rows/s: met",
		"bulk-enqueue rate (>= 150000 jobs/s; applies: the ceiling is 190000 rows/s): tenure InsertManyFast 160000 jobs/s: met",
		"bulk-enqueue share (>= 80% of the server's own insert ceiling): tenure InsertMany 100000 jobs/s = 50.0% of 200000 rows/s: not met",
		"bulk-enqueue rate (>= 150000 jobs/s; applies: the ceiling is 200000 rows/s): tenure InsertMany 100000 jobs/s: not met",
	}
	if strings.Join(rep.Targets, "\n") != strings.Join(want, "\n") {
		t.Errorf("targets:\n%s\nwant:\n%s", strings.Join(rep.Targets, "\n"), strings.Join(want, "\n"))
	}
	md := rep.markdown()
	for _, s := range []string{"connection cap=20", "tenure peak settings: Concurrency=500", "river peak settings: MaxWorkers=2000",
		"| peak-burn-down | connections held, max | conns | 9.000 | 5.000 |"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	// A ceiling below the absolute target leaves only the share.
	results[runKey{scenario.BulkEnqueue, unit{"tenure", "InsertManyFast"}}] = []*scenario.Result{res(map[string]float64{scenario.MJobsPerS: 60_000,
		scenario.MCeilingPerS: 100_000, scenario.MOfCeiling: 60}, nil)}
	rep = buildReport(c, specs, pgutil.ServerInfo{Settings: map[string]string{}}, results, nil, nil)
	if got := strings.Join(rep.Targets[2:], "\n"); !strings.Contains(got, "60.0% of 100000 rows/s: not met") || !strings.Contains(got, "does not apply") {
		t.Errorf("bulk targets with a low ceiling: %s", got)
	}

	// Tenure alone (-systems tenure): each API's line still pairs its own rate, ceiling and
	// share (a one-sided report once evaluated InsertMany's rate against InsertManyFast's share).
	one := config{reps: 1, scenarios: []string{scenario.BulkEnqueue}, systems: []string{"tenure"}, payload: 256}
	delete(results, runKey{scenario.BulkEnqueue, unit{"river", "InsertManyFast"}})
	delete(results, runKey{scenario.BulkEnqueue, unit{"river", "InsertMany"}})
	rep = buildReport(one, map[string]scenario.Spec{scenario.BulkEnqueue: specs[scenario.BulkEnqueue]},
		pgutil.ServerInfo{Settings: map[string]string{}}, results, nil, nil)
	want = []string{
		"bulk-enqueue share (>= 80% of the server's own insert ceiling): tenure InsertManyFast 60000 jobs/s = 60.0% of 100000 rows/s: not met",
		"bulk-enqueue rate (>= 150000 jobs/s): does not apply: the server's own ceiling is 100000 rows/s, below it; only the share applies",
		"bulk-enqueue share (>= 80% of the server's own insert ceiling): tenure InsertMany 100000 jobs/s = 50.0% of 200000 rows/s: not met",
		"bulk-enqueue rate (>= 150000 jobs/s; applies: the ceiling is 200000 rows/s): tenure InsertMany 100000 jobs/s: not met",
	}
	if strings.Join(rep.Targets, "\n") != strings.Join(want, "\n") {
		t.Errorf("one-sided targets:\n%s\nwant:\n%s", strings.Join(rep.Targets, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseTune(t *testing.T) {
	got, err := parseTune("tenure:concurrency=300,claimbatch=200; river:pool=4")
	if err != nil {
		t.Fatal(err)
	}
	if got["tenure"]["concurrency"] != "300" || got["tenure"]["claimbatch"] != "200" || got["river"]["pool"] != "4" {
		t.Fatalf("parsed %v", got)
	}
	for _, bad := range []string{"tenure:nosuchkey=1", "nosuchsystem:pool=1", "tenure:concurrency", "river"} {
		if _, err := parseTune(bad); err == nil {
			t.Errorf("parseTune(%q) accepted", bad)
		}
	}
}
