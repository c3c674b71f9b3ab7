package faults_test

import (
	"context"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/jobs"
)

// ownedRunning counts the running jobs a worker id still owns.
func ownedRunning(pool *pgxpool.Pool, id string) int {
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.jobs WHERE state = 'running' AND locked_by = $1", id).Scan(&n); err != nil {
		return -1
	}
	return n
}

// killEach SIGKILLs each child of kids in turn, settle after it reported a claimed job, and
// replaces it in kids with spawn() (then waits pause). It returns the replacements and a
// function that waits until no killed child owns a running job and returns the longest time
// from a kill to that point (each bounded by 30 s).
func killEach(t *testing.T, pool *pgxpool.Pool, kids []*childProc, spawn func() *childProc, settle, pause time.Duration) ([]*childProc, func() time.Duration) {
	t.Helper()
	var mu sync.Mutex
	var worst time.Duration
	var wg sync.WaitGroup
	var started []*childProc
	for k := range kids {
		victim := kids[k]
		victim.waitLine(t, 20*time.Second, "claimed", time.Now(), nil)
		time.Sleep(settle)
		owned := ownedRunning(pool, victim.name)
		victim.killAndWait(t)
		killed := time.Now()
		t.Logf("SIGKILL %s owning %d running jobs", victim.name, owned)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tryFor(30*time.Second, func() bool { return ownedRunning(pool, victim.name) == 0 })
			mu.Lock()
			worst = max(worst, time.Since(killed))
			mu.Unlock()
		}()
		kids[k] = spawn()
		started = append(started, kids[k])
		time.Sleep(pause)
	}
	return started, func() time.Duration {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return worst
	}
}

// TestKillAndStopWorkers (scenario 3): three worker processes run 900 effect jobs (each calls
// a remote that deduplicates by Idempotency-Key) with a 2 s lease. Three times a child is
// SIGKILLed mid-job and replaced; then a child is SIGSTOPped right after starting a job, kept
// stopped until others reclaimed its jobs, and SIGCONTed: its late writes must be rejected
// (StaleRejected >= 1). Asserted: every job succeeded, each effect key applied exactly once at
// the remote, nothing stuck, and the killed children's jobs were taken back within lease + 2 s.
func TestKillAndStopWorkers(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	url := pool.Config().ConnString()
	c := newClient(t, pool)
	remote := testkit.NewRemote(t)
	const n, lease = 900, 2 * time.Second
	ids := insertN(t, c, n, func(i int) any { return effArgs{N: i} }, &jobs.InsertOpts{Lease: lease})

	seq := 0
	spawn := func() *childProc {
		seq++
		return startChild(t, childOpts{DB: url, Handler: "effect", Remote: remote.URL, Concurrency: 4, SleepMS: 150,
			ID: "kill-" + strconv.Itoa(seq)})
	}
	kids := []*childProc{spawn(), spawn(), spawn()}
	all := append([]*childProc(nil), kids...)

	replacements, takenBack := killEach(t, pool, kids, spawn, 300*time.Millisecond, 700*time.Millisecond)
	all = append(all, replacements...)

	// SIGSTOP a child right after one of its handlers started.
	sleeper := kids[0]
	l := sleeper.waitLine(t, 20*time.Second, "claimed", time.Now(), nil)
	sleeper.signal(syscall.SIGSTOP)
	stopped := time.Now()
	jobID, _ := strconv.ParseInt(l.Fields[1], 10, 64)
	t.Logf("SIGSTOP %s while running job %d (generation %s)", sleeper.name, jobID, l.Fields[2])
	waitFor(t, 30*time.Second, "the stopped child's jobs to be reclaimed", func() bool {
		return ownedRunning(pool, sleeper.name) == 0 && time.Since(stopped) > lease
	})
	sleeper.signal(syscall.SIGCONT)
	t.Logf("SIGCONT after %v", time.Since(stopped).Round(time.Millisecond))
	var st []string
	waitFor(t, 20*time.Second, "the woken child's late write to be rejected", func() bool {
		sleeper.send(t, "stats")
		time.Sleep(100 * time.Millisecond)
		s := sleeper.all("stats")
		if len(s) == 0 {
			return false
		}
		st = s[len(s)-1].Fields
		return kvInt(st, "stale") >= 1
	})
	t.Logf("woken child: %v", st)

	waitFor(t, 60*time.Second, "every job to succeed", func() bool { return countStates(ctx, pool)["succeeded"] == n })
	worst := takenBack()
	tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
	notOnce, calls := remote.Check(ids, "charge")
	seen, conflicts := generationConflicts(all...)
	result(t, "sigkill-sigstop", tl, ms(worst), "kills=3", "effects_not_once="+strconv.Itoa(notOnce),
		"remote_calls="+strconv.Itoa(calls), "attempts="+strconv.Itoa(seen), "stale_after_sigcont="+kv(st, "stale"),
		"leases_lost_after_sigcont="+kv(st, "leases_lost"))
	require.Zero(t, notOnce, "effect keys applied other than exactly once")
	require.Empty(t, conflicts)
	require.Less(t, worst, lease+2*time.Second, "killed workers' jobs taken back within lease + 2 s")
}

// TestKillWorkersClaimingAhead: three worker processes with QueueConfig.ClaimAhead run 3,000
// short effect jobs (2 s lease); each is SIGKILLed once while it holds jobs, some of them
// claimed ahead (running in the table, no handler started), and replaced. Asserted: every job
// succeeded, each effect key applied exactly once at the remote, no two attempts with one
// generation, nothing stuck, the killed children's jobs (the waiting ones too) taken back
// within lease + 2 s, and jobs were claimed ahead.
func TestKillWorkersClaimingAhead(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	url := pool.Config().ConnString()
	c := newClient(t, pool)
	remote := testkit.NewRemote(t)
	const n, lease, conc = 3000, 2 * time.Second, 4
	ids := insertN(t, c, n, func(i int) any { return effArgs{N: i} }, &jobs.InsertOpts{Lease: lease})

	seq := 0
	spawn := func() *childProc {
		seq++
		return startChild(t, childOpts{DB: url, Handler: "effect", Remote: remote.URL, Concurrency: conc, ClaimAhead: conc,
			SleepMS: 3, ID: "ahead-" + strconv.Itoa(seq)})
	}
	kids := []*childProc{spawn(), spawn(), spawn()}
	all := append([]*childProc(nil), kids...)
	replacements, takenBack := killEach(t, pool, kids, spawn, 500*time.Millisecond, 0)
	all = append(all, replacements...)
	waitFor(t, 120*time.Second, "every job to succeed", func() bool { return countStates(ctx, pool)["succeeded"] == n })
	worst := takenBack()
	var ahead int64
	for _, k := range kids {
		k.send(t, "stats")
	}
	waitFor(t, 20*time.Second, "the survivors' stats", func() bool {
		ahead = 0
		for _, k := range kids {
			s := k.all("stats")
			if len(s) == 0 {
				return false
			}
			ahead += kvInt(s[len(s)-1].Fields, "claimed_ahead")
		}
		return true
	})
	tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
	notOnce, calls := remote.Check(ids, "charge")
	seen, conflicts := generationConflicts(all...)
	result(t, "sigkill-claim-ahead", tl, ms(worst), "kills=3", "effects_not_once="+strconv.Itoa(notOnce),
		"remote_calls="+strconv.Itoa(calls), "attempts="+strconv.Itoa(seen), "survivors_claimed_ahead="+strconv.FormatInt(ahead, 10))
	require.Zero(t, notOnce, "effect keys applied other than exactly once")
	require.Empty(t, conflicts)
	require.Less(t, worst, lease+2*time.Second, "killed workers' jobs taken back within lease + 2 s")
	require.Positive(t, ahead, "the survivors claimed jobs ahead")
}
