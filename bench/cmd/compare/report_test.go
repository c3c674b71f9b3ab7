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
			BenchCPU: benchCPU, PGCPU: 1, PGCPUValid: true}
	}
	results := map[runKey][]*scenario.Result{
		{scenario.BurnDown, unit{System: "tenure"}}:             {res(100, 1), res(300, 1)},
		{scenario.BurnDown, unit{System: "river"}}:              {res(100, 2), res(100, 2)},
		{scenario.BulkEnqueue, unit{System: "tenure"}}:          {res(10, 1)},
		{scenario.BulkEnqueue, unit{"river", "InsertManyFast"}}: {res(20, 1)},
		{scenario.BulkEnqueue, unit{"river", "InsertMany"}}:     {res(5, 1)},
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
	if r := find(scenario.BulkEnqueue, "throughput (River InsertManyFast)"); *r.Ratio != 0.5 {
		t.Fatalf("bulk fast row %+v", r)
	}
	if r := find(scenario.BulkEnqueue, "throughput (River InsertMany)"); *r.Ratio != 2 {
		t.Fatalf("bulk returning row %+v", r)
	}
	if md := rep.markdown(); !strings.Contains(md, "| burn-down | throughput | jobs/s | 200.0 | 100.0 | 2.00 |") {
		t.Fatalf("markdown:\n%s", md)
	}
}
