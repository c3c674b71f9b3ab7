package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

type wfArgs struct {
	Step string `json:"step"`
}

func (wfArgs) Kind() string        { return "wf_step" }
func (wfArgs) PayloadVersion() int { return 1 }

// tenure workflow get shows a diamond by depth with what each task still waits on (after the
// root succeeded, "join" waits on both branches and "left"/"right" on nothing), and -json
// carries the same; tenure workflow cancel is audited and cancels what has not run.
func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("nightly report", nil)
	wf.Add("root", wfArgs{"root"}, nil)
	wf.Add("left", wfArgs{"left"}, &jobs.TaskOpts{DependsOn: []string{"root"}})
	wf.Add("right", wfArgs{"right"}, &jobs.TaskOpts{DependsOn: []string{"root"}})
	wf.Add("join", wfArgs{"join"}, &jobs.TaskOpts{DependsOn: []string{"left", "right"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	id := res.ID.String()

	// The root succeeds (as a worker's fenced finish would: the trigger releases left and right).
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'succeeded', attempts = 1, attempted_at = now(), finished_at = now()
		WHERE id = $1`, res.Tasks["root"].ID)
	require.NoError(t, err)

	r := tenure(t, url, "workflow", "get", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "nightly report")
	require.Contains(t, r.stdout, "tasks     4 (ready 2, succeeded 1, waiting 1)")
	lines := strings.Split(r.stdout, "\n")
	var rows []string
	table := false
	for _, l := range lines {
		f := strings.Fields(l)
		if table && len(f) == 8 {
			rows = append(rows, f[0]+" "+f[1]+" "+f[4]+" "+f[6]+" "+f[7])
		}
		table = table || (len(f) > 0 && f[0] == "DEPTH")
	}
	require.Equal(t, []string{
		"0 root succeeded - -",
		"1 left ready root -",
		"1 right ready root -",
		"2 join waiting left,right left,right",
	}, rows, r.stdout)

	r = tenure(t, url, "jobs", "get", itoa(res.Tasks["join"].ID))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "task join (tenure workflow get "+id+")")
	require.Contains(t, r.stdout, "on 2 unresolved dependencies")
	r = tenure(t, url, "jobs", "get", itoa(res.Tasks["join"].ID), "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var job jsonJob
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &job))
	require.Equal(t, id, *job.WorkflowID)
	require.Equal(t, "join", *job.TaskName)
	require.Nil(t, job.SequenceKey)
	require.Equal(t, 2, job.DepsPending)

	r = tenure(t, url, "workflow", "get", id, "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var got jsonWorkflow
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Equal(t, id, got.ID)
	require.Equal(t, "nightly report", got.Name)
	require.Len(t, got.Tasks, 4)
	require.Equal(t, "join", got.Tasks[3].Task)
	require.Equal(t, 2, got.Tasks[3].Depth)
	require.Equal(t, 2, got.Tasks[3].DepsPending)
	require.Equal(t, []string{"left", "right"}, got.Tasks[3].WaitingOn)
	require.Len(t, got.Edges, 4)

	r = tenure(t, url, "workflow", "cancel", id)
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "-actor")
	r = tenure(t, url, "workflow", "cancel", id, "-actor", "ops", "-reason", "report withdrawn")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "3 tasks cancelled, 0 running asked to cancel")
	r = tenure(t, url, "jobs", "audit")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "report withdrawn")
	r = tenure(t, url, "workflow", "get", id)
	require.Contains(t, r.stdout, "(cancelled 3, succeeded 1)")

	r = tenure(t, url, "workflow", "get", "00000000-0000-0000-0000-000000000001")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "workflow not found")
	r = tenure(t, url, "workflow", "get", "not-a-uuid")
	require.Equal(t, exitUsage, r.code)
	r = tenure(t, url, "workflow", "get")
	require.Equal(t, exitUsage, r.code)
	r = tenure(t, url, "workflow", "frobnicate", id)
	require.Equal(t, exitUsage, r.code)
}
