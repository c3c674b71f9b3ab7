package faults_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/jobs"
)

// TestSoak (make soak; skipped unless TENURE_SOAK=1): four worker processes (the package's
// child harness, effect handler against the deduplicating remote, lease 2 s) run 20,000 jobs
// enqueued steadily over the chaos window, while for 2 minutes a random child is, every 0.5–2.5
// s, either SIGKILLed (and replaced) or SIGSTOPped for 0.3–3.8 s (often past its lease) and
// SIGCONTed. Then everything drains. Asserted: nothing lost, every job succeeded, nothing
// stuck running, every effect key applied exactly once at the remote, no (job, generation)
// seen with two claim tokens, and no child exited on its own. TENURE_SOAK_JOBS,
// TENURE_SOAK_SECONDS and TENURE_SOAK_SEED override the size, the chaos window and the seed.
func TestSoak(t *testing.T) {
	if os.Getenv("TENURE_SOAK") != "1" {
		t.Skip("soak test (minutes): run with make soak (TENURE_SOAK=1)")
	}
	ctx := context.Background()
	n := envInt("TENURE_SOAK_JOBS", 20000)
	chaosFor := time.Duration(envInt("TENURE_SOAK_SECONDS", 120)) * time.Second
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TENURE_SOAK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seed = v
	}
	t.Logf("soak: jobs=%d chaos=%v seed=%d", n, chaosFor, seed)
	r := rand.New(rand.NewPCG(seed, 1))
	const lease = 2 * time.Second

	pool := pgtest.NewPool(t)
	url := pool.Config().ConnString()
	c := newClient(t, pool)
	remote := testkit.NewRemote(t)

	seq := 0
	spawn := func() *childProc {
		seq++
		return startChild(t, childOpts{DB: url, Handler: "effect", Remote: remote.URL, Concurrency: 8, SleepMS: 10,
			ID: "soak-" + strconv.Itoa(seq)})
	}
	kids := make([]*childProc, 4)
	var all []*childProc
	for i := range kids {
		kids[i] = spawn()
		all = append(all, kids[i])
	}
	for _, k := range kids {
		k.waitLine(t, 30*time.Second, "ready", time.Time{}, nil)
	}

	// Enqueue steadily over 90% of the chaos window, so the faults hit a busy queue.
	var ids []int64
	var insErr error
	insDone := make(chan struct{})
	go func() {
		defer close(insDone)
		const chunks = 100
		per := (n + chunks - 1) / chunks
		gap := chaosFor * 9 / 10 / chunks
		for lo := 0; lo < n; lo += per {
			var ps []jobs.InsertManyParams
			for i := lo; i < min(n, lo+per); i++ {
				ps = append(ps, jobs.InsertManyParams{Args: effArgs{N: i}, Opts: &jobs.InsertOpts{Lease: lease}})
			}
			got, err := c.InsertMany(ctx, ps)
			if err != nil {
				insErr = err
				return
			}
			for _, r := range got {
				ids = append(ids, r.Job.ID)
			}
			time.Sleep(gap)
		}
	}()

	kills, stops, unexpected := 0, 0, 0
	respawnDead := func() {
		for i, k := range kids {
			select {
			case <-k.exited:
				unexpected++
				t.Errorf("child %s exited on its own: %v", k.name, k.waitErr)
				kids[i] = spawn()
				all = append(all, kids[i])
			default:
			}
		}
	}
	start := time.Now()
	for time.Since(start) < chaosFor {
		time.Sleep(time.Duration(500+r.IntN(2000)) * time.Millisecond)
		respawnDead()
		i := r.IntN(len(kids))
		victim := kids[i]
		if r.IntN(2) == 0 {
			victim.killAndWait(t)
			kills++
			kids[i] = spawn()
			all = append(all, kids[i])
			continue
		}
		victim.signal(syscall.SIGSTOP)
		stops++
		time.Sleep(time.Duration(300+r.IntN(3500)) * time.Millisecond)
		victim.signal(syscall.SIGCONT)
	}
	chaosEnd := time.Now()
	<-insDone
	require.NoError(t, insErr)
	require.Len(t, ids, n)
	respawnDead()
	t.Logf("chaos over after %v: %d SIGKILLs, %d SIGSTOP/SIGCONTs; draining", chaosEnd.Sub(start).Round(time.Millisecond), kills, stops)

	drained := tryFor(5*time.Minute, func() bool {
		s := countStates(ctx, pool)
		return s["ready"] == 0 && s["running"] == 0 && s["error"] == 0
	})
	drain := time.Since(chaosEnd)
	if !drained {
		t.Errorf("not drained 5 min after the chaos: %v", countStates(ctx, pool))
	}
	tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
	notOnce, calls := remote.Check(ids, "charge")
	seen, conflicts := generationConflicts(all...)
	stale := 0
	for _, k := range all {
		for _, l := range k.all("outcome") {
			if kv(l.Fields, "stale") == "true" {
				stale++
			}
		}
	}
	result(t, "soak", tl, "n/a", "drain="+ms(drain), "kills="+strconv.Itoa(kills), "stops="+strconv.Itoa(stops),
		"effects_not_once="+strconv.Itoa(notOnce), "remote_calls="+strconv.Itoa(calls), "attempts="+strconv.Itoa(seen),
		"generation_conflicts="+strconv.Itoa(len(conflicts)), "stale_rejected="+strconv.Itoa(stale),
		"unexpected_exits="+strconv.Itoa(unexpected), "seed="+strconv.FormatUint(seed, 10))
	require.Zero(t, notOnce, "effect keys applied other than exactly once")
	require.Empty(t, conflicts, "(job, generation) pairs with two claim tokens")
}
