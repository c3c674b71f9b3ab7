package scenario_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenureq/tenure/bench/internal/adaptertest"
	"github.com/tenureq/tenure/bench/internal/scenario"
	_ "github.com/tenureq/tenure/bench/internal/sut/riversut"
	_ "github.com/tenureq/tenure/bench/internal/sut/tenuresut"
)

func run(t *testing.T, spec scenario.Spec) *scenario.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res *scenario.Result
	if err := scenario.Run(ctx, spec, func(r *scenario.Result) { res = r }); err != nil {
		t.Fatalf("%s/%s: %v", spec.System, spec.Scenario, err)
	}
	if res == nil {
		t.Fatalf("%s/%s: no result published", spec.System, spec.Scenario)
	}
	return res
}

// The ceiling statement of each queue must insert into its own table what the run then counts,
// and the report's metrics must be there and consistent.
func TestBulkEnqueueCeiling(t *testing.T) {
	for _, sys := range []string{"tenure", "river"} {
		t.Run(sys, func(t *testing.T) {
			db := adaptertest.FreshDatabase(t, "ceiling_"+sys)
			res := run(t, scenario.Spec{Scenario: scenario.BulkEnqueue, System: sys, DBURL: db, MaxConns: 6,
				Jobs: 3000, Batch: 1000, PayloadBytes: 256, Ceiling: true, Inserters: 2, StopTimeout: 5 * time.Second})
			jobs, ceiling, share := res.Metrics[scenario.MJobsPerS], res.Metrics[scenario.MCeilingPerS], res.Metrics[scenario.MOfCeiling]
			if jobs <= 0 || ceiling <= 0 {
				t.Fatalf("metrics %v", res.Metrics)
			}
			if d := share - 100*jobs/ceiling; d > 1e-9 || d < -1e-9 {
				t.Fatalf("share %.3f, want %.3f", share, 100*jobs/ceiling)
			}
		})
	}
}

// Each side at its peak settings stays within the connection cap, and the sampler sees the
// connections (at least the worker's and the pool's).
func TestPeakBurnDownWithinCap(t *testing.T) {
	for _, sys := range []string{"tenure", "river"} {
		t.Run(sys, func(t *testing.T) {
			db := adaptertest.FreshDatabase(t, "peak_"+sys)
			res := run(t, scenario.Spec{Scenario: scenario.PeakBurnDown, System: sys, DBURL: db, Peak: true, ConnCap: 20,
				Jobs: 5000, Batch: 1000, PayloadBytes: 256, Duration: time.Minute, StopTimeout: 5 * time.Second})
			n := res.Metrics[scenario.MConnsMax]
			if n < 2 || n > 20 {
				t.Fatalf("connections held, max = %v; want 2..20", n)
			}
			if res.Metrics[scenario.MJobsPerS] <= 0 || res.Jobs != 5000 {
				t.Fatalf("result %+v", res)
			}
			if res.Settings["connections"] == "" {
				t.Fatalf("settings lack the connection breakdown: %v", res.Settings)
			}
		})
	}
}

func TestTuneOutsidePeakRefused(t *testing.T) {
	db := adaptertest.FreshDatabase(t, "tune")
	err := scenario.Run(context.Background(), scenario.Spec{Scenario: scenario.BurnDown, System: "tenure", DBURL: db, MaxConns: 4,
		Jobs: 10, Batch: 10, Workers: 2, Tune: map[string]string{"concurrency": "5"}}, nil)
	if err == nil {
		t.Fatal("a tune outside the peak scenarios was accepted")
	}
}
