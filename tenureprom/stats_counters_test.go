package tenureprom_test

import (
	"reflect"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/tenureprom"
	"github.com/tenureq/tenure/worker"
)

type fixedStats worker.Stats

func (s fixedStats) Stats() worker.Stats { return worker.Stats(s) }

// statsNotCounters are the int64 fields of worker.Stats that EngineCollector does not export
// as a counter of their own: the outcomes (exported per queue, kind and outcome as
// tenure_jobs_completed_total, from Stats.Outcomes) and the counters not exported yet. A new
// Stats counter fails TestEngineExportsStatsCounters until it is exported or listed here.
var statsNotCounters = []string{
	"Succeeded", "Retried", "Dead", "Cancelled", "Released", // tenure_jobs_completed_total
	"Snoozed", "LimitedClaims", "FlowBlocks", "StripedClaims", "PermitAllocations",
	"FinishBusy", "StalePlanRetries", "ReclaimErrors", "PruneErrors", "RegistryErrors",
	"PermissionErrors", "PeriodicEnqueued", "PeriodicSkipped", "PeriodicErrors",
}

// TestEngineExportsStatsCounters gives every int64 counter of a Stats snapshot its own value
// and checks which counter metric carries it: FinishedOnClaims and AwaitedFinishes (the
// completions that rode on claims, the finishes that skipped the linger for a waiter) as
// tenure_finished_on_claims_total and tenure_awaited_finishes_total, and every other counter
// either exported or listed in statsNotCounters.
func TestEngineExportsStatsCounters(t *testing.T) {
	t.Parallel()
	var s worker.Stats
	v := reflect.ValueOf(&s).Elem()
	fieldOf := map[float64]string{}
	var fields []string
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).Kind() != reflect.Int64 || v.Type().Field(i).Type != reflect.TypeOf(int64(0)) {
			continue // durations, maps, slices, times
		}
		val := int64(1000 + i)
		v.Field(i).SetInt(val)
		name := v.Type().Field(i).Name
		fieldOf[float64(val)] = name
		fields = append(fields, name)
	}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(tenureprom.NewEngineCollector(fixedStats(s))))
	fams, err := reg.Gather()
	require.NoError(t, err)
	metricOf := map[string]string{}
	for _, f := range fams {
		if f.GetType() != dto.MetricType_COUNTER || len(f.GetMetric()) != 1 || len(f.GetMetric()[0].GetLabel()) != 0 {
			continue
		}
		if field, ok := fieldOf[f.GetMetric()[0].GetCounter().GetValue()]; ok {
			require.NotContains(t, metricOf, field, "%s exported twice", field)
			metricOf[field] = f.GetName()
		}
	}
	require.Equal(t, "tenure_finished_on_claims_total", metricOf["FinishedOnClaims"])
	require.Equal(t, "tenure_awaited_finishes_total", metricOf["AwaitedFinishes"])
	require.Equal(t, "tenure_batches_total", metricOf["Batches"])
	require.Equal(t, "tenure_batch_jobs_total", metricOf["BatchJobs"])
	require.Equal(t, "tenure_claimed_ahead_total", metricOf["ClaimedAhead"])
	require.Equal(t, "tenure_claimed_ahead_released_total", metricOf["AheadReleased"])
	var missing []string
	for _, f := range fields {
		if _, ok := metricOf[f]; !ok {
			missing = append(missing, f)
		}
	}
	want := append([]string(nil), statsNotCounters...)
	sort.Strings(want)
	sort.Strings(missing)
	require.Equal(t, want, missing, "worker.Stats counters without a metric (export a new one, or list it in statsNotCounters)")
}
