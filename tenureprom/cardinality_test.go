package tenureprom_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/tenureprom"
)

// TestClusterLabelsAreCapped reproduces issue 29 item 7: 5,000 kinds enqueued through SQL
// (tenure.enqueue) over 300 queues made 15,000 tenure_queue_* series. Kinds and queues are
// user strings, so the collector keeps the MaxKinds kinds and MaxQueues queues with the most
// jobs and folds the rest into "other": each label has at most its cap of values (including
// "other"), the series stay few, and the totals (ready, scheduled, running, dead, dead by
// code, lease expired) are preserved, the oldest ready age is the oldest of the folded ones.
func TestClusterLabelsAreCapped(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
SELECT tenure.enqueue('kind-' || g, jsonb_build_object('n', g), queue => 'q' || (g % 300)) FROM generate_series(1, 5000) g;
SELECT tenure.enqueue('kind-' || g, '{}', queue => 'q' || (g % 300), run_at => now() + interval '1 hour') FROM generate_series(1, 700) g;
UPDATE tenure.jobs SET run_at = now() - interval '1 hour' WHERE kind = 'kind-4999' AND run_at <= now();
INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, locked_by, locked_until, claim_token, attempted_at, generation)
SELECT 'rq' || (g % 150), 'running-' || g, '{}', 'running', 1, 'w', now() - interval '1 second', gen_random_uuid(), now(), 1
FROM generate_series(1, 400) g;
INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, max_attempts, finished_at, last_error_code)
SELECT 'dq' || (g % 170), 'dead-' || g, '{}', 'dead', 1, 1, now(), CASE WHEN g % 2 = 0 THEN 'TIMEOUT' ELSE 'HANDLER_ERROR' END
FROM generate_series(1, 900) g;`)
	require.NoError(t, err)

	col, err := tenureprom.NewClusterCollector(pool, nil)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	series := checkSeries(t, scrape(t, reg), clusterLabels)

	values := map[string]map[string]bool{"queue": {}, "kind": {}}
	sums := map[string]float64{}
	var queueSeries int
	oldest := 0.0
	for key, m := range series {
		name := key[:len(key)-len(key[indexByte(key, '{'):])]
		if name == "tenure_queue_jobs" || name == "tenure_queue_oldest_ready_age_seconds" || name == "tenure_queue_lease_expired_jobs" ||
			name == "tenure_queue_cancel_requested_jobs" || name == "tenure_queue_dead_jobs_by_code" {
			queueSeries++
		}
		state := ""
		for _, l := range m.GetLabel() {
			if values[l.GetName()] != nil {
				values[l.GetName()][l.GetValue()] = true
			}
			if l.GetName() == "state" {
				state = l.GetValue()
			}
		}
		switch name {
		case "tenure_queue_jobs":
			sums[state] += value(m)
		case "tenure_queue_dead_jobs_by_code", "tenure_queue_lease_expired_jobs":
			sums[name] += value(m)
		case "tenure_queue_oldest_ready_age_seconds":
			oldest = max(oldest, value(m))
		}
	}
	t.Logf("%d tenure_queue_* series; %d queue values, %d kind values", queueSeries, len(values["queue"]), len(values["kind"]))
	require.LessOrEqual(t, len(values["kind"]), tenureprom.DefaultMaxKinds)
	require.LessOrEqual(t, len(values["queue"]), tenureprom.DefaultMaxQueues)
	require.True(t, values["kind"][tenureprom.OtherLabel] && values["queue"][tenureprom.OtherLabel], "the folded values are summed under %q", tenureprom.OtherLabel)
	require.Less(t, queueSeries, 3000, "series bounded by the caps, not by the kinds")
	require.Equal(t, 5000.0, sums["ready"])
	require.Equal(t, 700.0, sums["scheduled"])
	require.Equal(t, 400.0, sums["running"])
	require.Equal(t, 900.0, sums["dead"])
	require.Equal(t, 900.0, sums["tenure_queue_dead_jobs_by_code"])
	require.Equal(t, 400.0, sums["tenure_queue_lease_expired_jobs"])
	require.GreaterOrEqual(t, oldest, 3000.0, "the oldest ready job (an hour) is still seen, folded or not")

	// A small installation is unchanged: with caps above its kinds and queues nothing folds.
	col2, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{MaxKinds: 10000, MaxQueues: 1000, MaxDeadCodeSeries: 10000})
	require.NoError(t, err)
	reg2 := prometheus.NewPedanticRegistry()
	require.NoError(t, reg2.Register(col2))
	for key := range checkSeries(t, scrape(t, reg2), clusterLabels) {
		require.NotContains(t, key, "="+tenureprom.OtherLabel, "nothing folds under the caps")
	}
}

func indexByte(s string, c byte) int {
	for i := range len(s) {
		if s[i] == c {
			return i
		}
	}
	return len(s)
}
