package faults_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/jobs"
)

// wfSample is what one 10 ms sample of the table found wrong (one statement: one snapshot).
type wfSample struct {
	early      int // workflow tasks out of waiting while a dependency has not succeeded
	seqTwo     int // sequence keys with two running jobs
	seqOrder   int // sequence jobs running or succeeded while an earlier job of the key has not succeeded
	seqRunning int // sequence jobs running (to show the sampler saw work)
}

const wfSampleSQL = `
SELECT
  (SELECT count(*) FROM tenure.job_deps e
     JOIN tenure.jobs j ON j.id = e.job_id
     JOIN tenure.jobs d ON d.id = e.dep_id
   WHERE j.workflow_id = $1 AND j.state <> 'waiting' AND d.state <> 'succeeded')::int,
  (SELECT count(*) FROM (SELECT sequence_key FROM tenure.jobs
                         WHERE sequence_key IS NOT NULL AND state = 'running'
                         GROUP BY sequence_key HAVING count(*) > 1) k)::int,
  (SELECT count(*) FROM tenure.jobs r
   WHERE r.sequence_key IS NOT NULL AND r.state IN ('running', 'succeeded')
     AND EXISTS (SELECT 1 FROM tenure.jobs p
                 WHERE p.sequence_key = r.sequence_key AND p.id < r.id AND p.state <> 'succeeded'))::int,
  (SELECT count(*) FROM tenure.jobs WHERE sequence_key IS NOT NULL AND state = 'running')::int`

// TestWorkflowUnderFaults (scenario: workflows and sequences, issue 30): a 1,000-task workflow
// (10 layers of 100 tasks, each task after 1-3 tasks of the layer before) and 20 sequences of
// 20 jobs run on two worker processes with a 2 s lease, while a child is SIGKILLed and
// replaced, PostgreSQL is restarted with `-m immediate` (crash recovery), and a second child is
// SIGKILLed. The table is sampled every 10 ms (one statement, one snapshot). Asserted:
//   - every task and sequence job ends succeeded (none lost, none stuck);
//   - no sample ever showed a task out of waiting while one of its dependencies had not
//     succeeded, and at the end every edge is resolved, every task's first claim (attempted_at)
//     is after every dependency's finish (finished_at), and deps_pending is 0;
//   - no task was made runnable twice: each claim beyond a task's first is explained by a
//     recorded failed attempt (attempts = 1 + its errors) and no (job, generation) was handed
//     out with two claim tokens;
//   - no sample showed two running jobs of one sequence key, or a sequence job running or
//     succeeded while an earlier one of its key had not succeeded.
func TestWorkflowUnderFaults(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	srv := privateCluster(t)
	url := migratedDB(t, srv, "workflow_faults")
	pool := openPool(t, url, 4, "faults-parent")
	c := newClient(t, pool)
	const layers, width, keys, perKey, lease = 10, 100, 20, 20, 2 * time.Second

	// Sequences first (20 keys x 20 jobs, inserted key-interleaved), then the workflow.
	var seqIDs []int64
	for r := 0; r < perKey; r++ {
		for k := 0; k < keys; k++ {
			res, err := c.Insert(ctx, faultArgs{N: r}, &jobs.InsertOpts{Lease: lease, Sequence: "seq-" + strconv.Itoa(k)})
			require.NoError(t, err)
			seqIDs = append(seqIDs, res.Job.ID)
		}
	}
	wf := jobs.NewWorkflow("faults", nil)
	name := func(l, i int) string { return fmt.Sprintf("L%d-%d", l, i) }
	edges := 0
	for l := 0; l < layers; l++ {
		for i := 0; i < width; i++ {
			var deps []string
			if l > 0 {
				seen := map[int]bool{}
				for _, d := range []int{i, (i*7 + 3) % width, (i*13 + 5) % width} {
					if !seen[d] && (d == i || (i+l)%3 != 0) { // fan-in 1 to 3
						seen[d] = true
						deps = append(deps, name(l-1, d))
					}
				}
			}
			edges += len(deps)
			wf.Add(name(l, i), faultArgs{N: l*width + i}, &jobs.TaskOpts{InsertOpts: jobs.InsertOpts{Lease: lease}, DependsOn: deps})
		}
	}
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	var wfIDs []int64
	for _, r := range res.Tasks {
		wfIDs = append(wfIDs, r.ID)
	}
	require.Len(t, wfIDs, layers*width)

	// The sampler: every 10 ms until the end; samples that fail (the server restarting) are counted.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var worst wfSample
	var samples, sampleErrs, sawSeqRunning atomic.Int64
	var firstBad string
	var sampleWG sync.WaitGroup
	sampleWG.Add(1)
	go func() {
		defer sampleWG.Done()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-tk.C:
			}
			var s wfSample
			qctx, cancel := context.WithTimeout(sampleCtx, 2*time.Second)
			err := pool.QueryRow(qctx, wfSampleSQL, res.ID).Scan(&s.early, &s.seqTwo, &s.seqOrder, &s.seqRunning)
			cancel()
			if err != nil {
				sampleErrs.Add(1)
				continue
			}
			samples.Add(1)
			if s.seqRunning > 0 {
				sawSeqRunning.Add(1)
			}
			if (s.early > 0 || s.seqTwo > 0 || s.seqOrder > 0) && firstBad == "" {
				firstBad = fmt.Sprintf("sample %d: %+v", samples.Load(), s)
			}
			worst.early, worst.seqTwo, worst.seqOrder = max(worst.early, s.early), max(worst.seqTwo, s.seqTwo), max(worst.seqOrder, s.seqOrder)
		}
	}()

	childURL := withAppName(url, "faults-child")
	seq := 0
	spawn := func() *childProc {
		seq++
		return startChild(t, childOpts{DB: childURL, Handler: "record", Concurrency: 8, SleepMS: 60, ID: "wf-" + strconv.Itoa(seq)})
	}
	kids := []*childProc{spawn(), spawn()}
	all := append([]*childProc(nil), kids...)
	claimed := func() int {
		n := 0
		for _, k := range all {
			n += k.count("claimed")
		}
		return n
	}
	total := len(wfIDs) + len(seqIDs)

	// Fault 1: SIGKILL a child mid-run, replace it.
	waitFor(t, 60*time.Second, "200 handler starts", func() bool { return claimed() >= 200 })
	kids[0].killAndWait(t)
	kids[0] = spawn()
	all = append(all, kids[0])
	// Fault 2: crash PostgreSQL (every server process killed, recovery from WAL).
	waitFor(t, 60*time.Second, "500 handler starts", func() bool { return claimed() >= 500 })
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	require.NoError(t, srv.Restart(rctx, pgserver.ModeImmediate))
	cancel()
	// Fault 3: SIGKILL the other child once work resumed.
	waitFor(t, 60*time.Second, "800 handler starts", func() bool { return claimed() >= 800 })
	kids[1].killAndWait(t)
	kids[1] = spawn()
	all = append(all, kids[1])

	waitFor(t, 90*time.Second, "every task and sequence job to succeed", func() bool {
		return countStates(ctx, pool)["succeeded"] == total
	})
	stopSampling()
	sampleWG.Wait()

	tl := audit(t, pool, append(append([]int64(nil), wfIDs...), seqIDs...), generics.JobStateSucceeded, time.Second)
	var badEdges, unresolved, pending, unexplained, retried int
	// A claim stamps attempted_at from its own clock, read after its snapshot (tenure.own,
	// migration 0025): later than the commit, and so the finished_at, of every dependency whose
	// release it saw, also when the claim's transaction began earlier or completed the
	// dependency itself (a completion riding on the claim: "Completions ride on claims").
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE d.state <> 'succeeded' OR j.attempted_at IS NULL OR d.finished_at IS NULL
		                              OR j.attempted_at <= d.finished_at),
		       count(*) FILTER (WHERE NOT e.resolved)
		FROM tenure.job_deps e JOIN tenure.jobs j ON j.id = e.job_id JOIN tenure.jobs d ON d.id = e.dep_id
		WHERE j.workflow_id = $1`, res.ID).Scan(&badEdges, &unresolved))
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE deps_pending <> 0),
		       count(*) FILTER (WHERE jsonb_array_length(errors) < 10 AND attempts <> 1 + jsonb_array_length(errors)),
		       count(*) FILTER (WHERE attempts > 1)
		FROM tenure.jobs WHERE workflow_id = $1 OR sequence_key IS NOT NULL`, res.ID).Scan(&pending, &unexplained, &retried))
	var edgeRows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.job_deps e JOIN tenure.jobs j ON j.id = e.job_id
		WHERE j.workflow_id = $1`, res.ID).Scan(&edgeRows))
	seen, conflicts := generationConflicts(all...)
	result(t, "workflow-sequence-kill-crash", tl, "-",
		"tasks="+strconv.Itoa(len(wfIDs)), "edges="+strconv.Itoa(edgeRows), "sequence_jobs="+strconv.Itoa(len(seqIDs)),
		"kills=2", "pg_crash=1", "samples="+strconv.FormatInt(samples.Load(), 10),
		"sample_errors="+strconv.FormatInt(sampleErrs.Load(), 10), "samples_with_seq_running="+strconv.FormatInt(sawSeqRunning.Load(), 10),
		"early_releases="+strconv.Itoa(worst.early), "seq_two_running="+strconv.Itoa(worst.seqTwo),
		"seq_out_of_order="+strconv.Itoa(worst.seqOrder), "bad_edges="+strconv.Itoa(badEdges),
		"retried="+strconv.Itoa(retried), "unexplained_claims="+strconv.Itoa(unexplained), "attempts="+strconv.Itoa(seen))
	require.Equal(t, edges, edgeRows, "edges stored")
	require.Zero(t, worst.early, "a task left waiting before all its dependencies succeeded: %s", firstBad)
	require.Zero(t, worst.seqTwo, "two running jobs of one sequence key: %s", firstBad)
	require.Zero(t, worst.seqOrder, "a sequence ran out of order: %s", firstBad)
	var badEdge string
	if badEdges > 0 {
		_ = pool.QueryRow(ctx, `
			SELECT format('task %s attempted_at %s attempts %s; dependency %s state %s finished_at %s',
			              j.id, j.attempted_at, j.attempts, d.id, d.state, d.finished_at)
			FROM tenure.job_deps e JOIN tenure.jobs j ON j.id = e.job_id JOIN tenure.jobs d ON d.id = e.dep_id
			WHERE j.workflow_id = $1 AND (d.state <> 'succeeded' OR j.attempted_at IS NULL OR d.finished_at IS NULL
			                              OR j.attempted_at <= d.finished_at)
			LIMIT 1`, res.ID).Scan(&badEdge)
	}
	require.Zero(t, badEdges, "a task claimed before a dependency's finish, or a dependency not succeeded: %s", badEdge)
	require.Zero(t, unresolved, "edges left unresolved")
	require.Zero(t, pending, "tasks with deps_pending left")
	require.Zero(t, unexplained, "a claim not explained by a failed attempt: a task made runnable twice")
	if len(conflicts) > 5 {
		conflicts = conflicts[:5]
	}
	require.Empty(t, conflicts, "a (job, generation) pair handed out with two claim tokens: %s", strings.Join(conflicts, "; "))
	require.Greater(t, samples.Load(), int64(100), "the sampler ran")
	require.Positive(t, sawSeqRunning.Load(), "the sampler saw sequence jobs running")
}
