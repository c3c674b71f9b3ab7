package tenureprom_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureprom"
)

type stepArgs struct {
	N int `json:"n"`
}

func (stepArgs) Kind() string        { return "step" }
func (stepArgs) PayloadVersion() int { return 1 }

// Jobs waiting on dependencies (a workflow's tasks, a sequence's later jobs) are counted per
// queue and kind with the oldest one's age; released tasks leave the count, and a queue and
// kind with none waiting has no series.
func TestClusterWaitingOnDependencies(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("report", nil)
	wf.Add("root", stepArgs{}, nil)
	wf.Add("a", stepArgs{1}, &jobs.TaskOpts{DependsOn: []string{"root"}})
	wf.Add("b", stepArgs{2}, &jobs.TaskOpts{DependsOn: []string{"root"}, InsertOpts: jobs.InsertOpts{Queue: "mail"}})
	wf.Add("join", stepArgs{3}, &jobs.TaskOpts{DependsOn: []string{"a", "b"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	for range 3 {
		_, err := c.Insert(ctx, stepArgs{}, &jobs.InsertOpts{Sequence: "account-7"})
		require.NoError(t, err)
	}
	// The join has waited for a minute.
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET created_at = now() - interval '60 seconds' WHERE id = $1`, res.Tasks["join"].ID)
	require.NoError(t, err)

	col, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{MaxAge: -1, Wait: -1})
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	series := checkSeries(t, scrape(t, reg), clusterLabels)
	// default/step: a, join (workflow) + 2 sequence jobs behind the first; mail/step: b.
	require.Equal(t, 4.0, value(series["tenure_queue_waiting_jobs{kind=step,queue=default}"]))
	require.Equal(t, 1.0, value(series["tenure_queue_waiting_jobs{kind=step,queue=mail}"]))
	require.InDelta(t, 60, value(series["tenure_queue_oldest_waiting_age_seconds{kind=step,queue=default}"]), 10)
	require.Less(t, value(series["tenure_queue_oldest_waiting_age_seconds{kind=step,queue=mail}"]), 30.0)

	// The root succeeds: a and b are released (the trigger), so mail has nothing waiting.
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'succeeded', attempts = 1, attempted_at = now(), finished_at = now() WHERE id = $1`,
		res.Tasks["root"].ID)
	require.NoError(t, err)
	series = checkSeries(t, scrape(t, reg), clusterLabels)
	require.Equal(t, 3.0, value(series["tenure_queue_waiting_jobs{kind=step,queue=default}"]))
	require.NotContains(t, series, "tenure_queue_waiting_jobs{kind=step,queue=mail}")
	require.NotContains(t, series, "tenure_queue_oldest_waiting_age_seconds{kind=step,queue=mail}")
}
