package main

import (
	"math"
	"strings"
	"testing"

	"github.com/tenureq/tenure/bench/internal/claimtrace"
)

func TestLinfit(t *testing.T) {
	k, m := linfit([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7})
	if math.Abs(k-2) > 1e-12 || math.Abs(m-4) > 1e-12 {
		t.Errorf("linfit = %v, %v; want 2, 4", k, m)
	}
	if k, m := linfit([]float64{5, 5}, []float64{1, 3}); k != 0 || m != 2 {
		t.Errorf("vertical data: %v, %v", k, m)
	}
	if k, m := linfit(nil, nil); k != 0 || m != 0 {
		t.Errorf("empty: %v, %v", k, m)
	}
}

// A heap growing 1 MB a minute for 10 minutes while p99 stays at 2 ms: slope +10 MB per 10
// minutes and +0 ms; the second half is fitted on its own samples.
func TestSlopes(t *testing.T) {
	var samples []Sample
	for i := 0; i <= 10; i++ {
		samples = append(samples, Sample{T: float64(60 * i), Claim: claimtrace.Summary{P99Ms: 2},
			Sizes: Sizes{TableBytes: int64(i) << 20, Indexes: map[string]int64{"jobs_ready_idx": 1 << 20}}})
	}
	got := map[string]Slope{}
	for _, s := range slopes(samples) {
		got[s.Window+"/"+s.Metric] = s
	}
	heap := got["whole run/table (heap)"]
	if math.Abs(heap.PerTenMin-10) > 1e-9 || math.Abs(heap.Mean-5) > 1e-9 || heap.First != 0.5 || heap.Last != 9.5 {
		t.Errorf("heap slope %+v", heap)
	}
	if s := got["whole run/claim p99"]; s.PerTenMin != 0 || s.Mean != 2 {
		t.Errorf("p99 slope %+v", s)
	}
	if s := got["whole run/jobs_ready_idx"]; s.PerTenMin != 0 || s.Mean != 1 {
		t.Errorf("index slope %+v", s)
	}
	half := got["second half/table (heap)"]
	if half.From != 300 || half.To != 600 || math.Abs(half.PerTenMin-10) > 1e-9 {
		t.Errorf("second half %+v", half)
	}
	if slopes(samples[:1]) != nil {
		t.Error("one sample has no slope")
	}
}

func TestReportRendersPointsAndPlots(t *testing.T) {
	r := &Report{Machine: Machine{CPUs: 2}}
	r.setSweep(&Sweep{Name: SweepWorkers, Param: "worker slots", Unit: "slots", Title: "Worker slots", Points: []Point{
		{X: 8, JobsPerS: 1900, Claim: claimtrace.Summary{P99Ms: 1.5}},
		{X: 2000, JobsPerS: 9000, Claim: claimtrace.Summary{P99Ms: 12}},
	}})
	r.setSweep(&Sweep{Name: SweepFinished, Param: "finished rows retained", Unit: "rows", Title: "Finished rows retained", Points: []Point{
		{X: 0, JobsPerS: 10000, Claim: claimtrace.Summary{P99Ms: 3}},
		{X: 100000, JobsPerS: 9800, Claim: claimtrace.Summary{P99Ms: 3.2}},
	}})
	if r.Sweeps[0].Name != SweepFinished {
		t.Errorf("sweeps not in run order: %s first", r.Sweeps[0].Name)
	}
	md := r.markdown()
	for _, want := range []string{"## Worker slots", "| 2k | 9000 |", "| 0 | 10000 |", "scaling-workers.svg"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	figs := r.figures()
	svg := string(figs["scaling-finished.svg"].Render())
	if !strings.Contains(svg, "0 drawn at 10k") || strings.Count(svg, `data-name="jobs/s"`) != 1 {
		t.Errorf("finished plot: zero point label or throughput series missing")
	}
	if _, ok := figs["scaling-soak.svg"]; ok {
		t.Error("no soak ran, yet a soak plot")
	}
}

// TestReportSoakCapacities: the soak section gives both capacities and what the retained-table
// run held, and formats cleanly (no stray verbs from the note's own percent sign).
func TestReportSoakCapacities(t *testing.T) {
	r := &Report{Machine: Machine{CPUs: 2}, Soak: &Soak{CapacityFreshPerS: 10169, CapacityPerS: 8000, RetainedRows: 2_135_490,
		Load: 0.7, OfferedPerS: 5600, RetentionS: 300, DurationS: 1800, Slots: 100, SampleEveryS: 10}}
	md := r.markdown()
	for _, want := range []string{"Capacity on a fresh table: 10169 jobs/s.", "Capacity: 8000 jobs/s",
		"holding 2135490 succeeded rows finished over the last 5m0s", "at 70% of the fresh capacity", "Then 70% of it, 5600 jobs/s"} {
		if !strings.Contains(md, want) {
			t.Errorf("soak section lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "%!") {
		t.Errorf("a formatting verb went wrong:\n%s", md)
	}
}
