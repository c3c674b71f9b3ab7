package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/internal/pgtest"
)

// pickClaimBatch takes requests oldest first, never two of one queue in a statement (they
// would pick the same rows: a statement does not skip its own locks), within the caps, and
// answers requests whose caller gave up instead of running them.
func TestPickClaimBatch(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(live)
	cancel()
	req := func(ctx context.Context, q string, n int) *claimReq {
		return &claimReq{ctx: ctx, queue: q, n: n, reply: make(chan claimReply, 1)}
	}
	a1, b1, a2, c1, dead, b2 := req(live, "a", 2), req(live, "b", 1), req(live, "a", 3), req(live, "c", 1), req(gone, "d", 1), req(live, "b", 1)
	take, rest := pickClaimBatch([]*claimReq{a1, b1, a2, c1, dead, b2})
	require.Equal(t, []*claimReq{a1, b1, c1}, take)
	require.Equal(t, []*claimReq{a2, b2}, rest)
	select {
	case r := <-dead.reply:
		require.ErrorIs(t, r.err, context.Canceled)
	default:
		t.Fatal("an abandoned request was not answered")
	}
	take, rest = pickClaimBatch(rest)
	require.Equal(t, []*claimReq{a2, b2}, take)
	require.Empty(t, rest)

	// Caps: requests per statement, rows per statement (a lone oversized request still leaves).
	var many []*claimReq
	for i := range claimBatchRequests + 10 {
		many = append(many, req(live, fmt.Sprint(i), 1))
	}
	take, rest = pickClaimBatch(many)
	require.Len(t, take, claimBatchRequests)
	require.Len(t, rest, 10)
	big := []*claimReq{req(live, "x", claimBatchRows), req(live, "y", 1)}
	take, rest = pickClaimBatch(big)
	require.Equal(t, big[:1], take)
	require.Equal(t, big[1:], rest)
}

// A request whose caller's context ends while its statement runs still gets the statement's
// rows: they are claimed (committed) and must reach the queue's loop, or they would sit
// running until their lease expired. A request whose caller gave up before it was sent to the
// database never runs and claims nothing.
func TestClaimBatchCallerWaitsForItsStatement(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload) VALUES ('a', 'noop', '{}'), ('b', 'noop', '{}')`)
	require.NoError(t, err)
	w := &Engine{cfg: Config{ID: "batch-test"}, eng: pool, q: gen.New(pool), sch: dbschema.Must(dbschema.Default), m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		kinds: claimKinds{names: []string{"noop"}, versions: []int32{1}, leaseMs: []int32{0}}, claimIn: newClaimIntake(), clk: RealClock{}}
	w.claimLog.Every = ErrorLogEvery
	bctx, stop := context.WithCancel(ctx)
	w.spawn(func() { w.claimBatcher(bctx) })
	defer func() { stop(); w.engWG.Wait() }()
	segs := []ClaimSeg{{Priority: 2, MaxUs: maxAgeUs(0)}}
	qa, qb := &queue{w: w, name: "a"}, &queue{w: w, name: "b"}

	// Given up before it was sent: nothing is claimed.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	rows, err := qb.claimBatched(gone, 1, segs, false)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, rows)

	// Given up while its statement waits for a lock.
	hold, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = hold.Exec(ctx, "LOCK TABLE tenure.jobs IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	cctx, cancelCaller := context.WithCancel(ctx)
	type res struct {
		rows []gen.ClaimStrictRow
		err  error
	}
	done := make(chan res, 1)
	go func() {
		rows, err := qa.claimBatched(cctx, 1, segs, false)
		done <- res{rows, err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE '-- name: ClaimOrderedMany%' AND wait_event_type = 'Lock'`).Scan(&n))
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the batched claim never waited for the lock")
		time.Sleep(10 * time.Millisecond)
	}
	cancelCaller()
	select {
	case <-done:
		t.Fatal("the caller left while its statement was running")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, hold.Rollback(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.rows, 1)
	require.Equal(t, "a", deref0(r.rows[0].Queue))
	var states []string
	rs, err := pool.Query(ctx, "SELECT queue || ':' || state FROM tenure.jobs ORDER BY queue")
	require.NoError(t, err)
	for rs.Next() {
		var s string
		require.NoError(t, rs.Scan(&s))
		states = append(states, s)
	}
	require.Equal(t, []string{"a:running", "b:ready"}, states)
}

// The batched claim's pipeline turns bitmap scans off for its own transaction only.
func TestClaimBatchNoBitmapIsLocal(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	rows, err := (&AfterLock{Pool: pool, Sch: dbschema.Must(dbschema.Default), Locks: noBitmap}).Query(ctx, "SELECT current_setting('enable_bitmapscan')")
	require.NoError(t, err)
	var in []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		in = append(in, v)
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.Equal(t, []string{"off"}, in)
	for range 4 { // whichever connection ran it
		var v string
		require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('enable_bitmapscan')").Scan(&v))
		require.Equal(t, "on", v)
	}
}

// batcherWorker is a worker with only a claim batcher running (the queues are driven by hand).
func batcherWorker(t *testing.T, pool *pgxpool.Pool, clk Clock) *Engine {
	t.Helper()
	w := &Engine{cfg: Config{ID: "batch-test", MaxClaimBatch: 100}, eng: pool, q: gen.New(pool), sch: dbschema.Must(dbschema.Default), m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		kinds: claimKinds{names: []string{"noop"}, versions: []int32{1}, leaseMs: []int32{0}}, claimIn: newClaimIntake(), clk: clk}
	w.claimLog.Every = ErrorLogEvery
	bctx, stop := context.WithCancel(context.Background())
	w.spawn(func() { w.claimBatcher(bctx) })
	t.Cleanup(func() { stop(); w.engWG.Wait() })
	return w
}

// allBandsAged are a plain ordered claim's segments (the default policy) as the claim sends
// them: bands 9 down to 1, each with its age bound.
func allBandsAged() []ClaimSeg {
	var segs []ClaimSeg
	for p := MaxPriority; p >= MinPriority; p-- {
		segs = append(segs, ClaimSeg{Priority: int16(p), MaxUs: maxAgeUs(0)})
	}
	return segs
}

// The cost of skipping, bounded: a job that becomes claimable without a hinted NOTIFY in a band
// the busy queue found empty is claimed once BandSkipFor has passed (or at once on a hint, or
// on a full claim), and the claims in between still serve the other bands in order.
func TestClaimBatchSkippedBandIsProbedAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at)
		SELECT 'a', 'noop', '{}', 2, now() - interval '1 minute' + g * interval '1 millisecond' FROM generate_series(1, 10) g`)
	require.NoError(t, err)
	fc := NewFakeClock(time.Unix(1_000_000, 0))
	w := batcherWorker(t, pool, fc)
	q := &queue{w: w, name: "a"}
	claim := func(full bool) int16 {
		t.Helper()
		rep := q.sendClaim(ctx, 1, allBandsAged(), full)
		require.NoError(t, rep.err)
		require.Len(t, rep.rows, 1)
		return deref0(rep.rows[0].Priority)
	}
	require.Equal(t, int16(2), claim(false))
	require.Equal(t, []int16{2, 1}, bandsOf(q.skip.Filter(allBandsAged(), fc.Now(), false)))
	// A band-9 job made ready without a NOTIFY (as a retry's due time passing is): skipped...
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at) VALUES ('a', 'noop', '{}', 9, now() - interval '1 minute')`)
	require.NoError(t, err)
	fc.Advance(BandSkipFor / 2)
	require.Equal(t, int16(2), claim(false), "the skipped band was probed")
	// ...until BandSkipFor has passed since a claim last found the band empty.
	fc.Advance(BandSkipFor)
	require.Equal(t, int16(9), claim(false))
	// A hint ends the skip at once.
	require.Equal(t, int16(2), claim(false))
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at) VALUES ('a', 'noop', '{}', 8, now() - interval '1 minute')`)
	require.NoError(t, err)
	fc.Advance(time.Millisecond)
	require.Equal(t, int16(2), claim(false))
	q.skip.Hinted(8, fc.Now())
	require.Equal(t, int16(8), claim(false))
	// A full claim probes every band.
	require.Equal(t, int16(2), claim(false))
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at) VALUES ('a', 'noop', '{}', 7, now() - interval '1 minute')`)
	require.NoError(t, err)
	require.Equal(t, int16(7), claim(true))
}

// Fairness between queues, counted in statements: next to a busy queue with a deep backlog
// whose two claimers keep a request pending all the time, each request of a small queue leaves
// in the first statement the batcher starts after it arrives (the bound: ceil(2/k) = 1
// statement not carrying it, k = min(claimBatchRequests, claimBatchRows/MaxClaimBatch)), and
// the small queue's jobs are all claimed while most of the busy backlog is still ready.
func TestClaimBatchSmallQueueLeavesWithinTheBound(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const busyJobs, smallJobs, busyBatch = 20000, 5, 50
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, run_at)
		SELECT 'busy', 'noop', '{}', now() - interval '1 minute' + g * interval '1 microsecond' FROM generate_series(1, $1::int) g`, busyJobs)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload) SELECT 'small', 'noop', '{}' FROM generate_series(1, $1::int)`, smallJobs)
	require.NoError(t, err)
	w := batcherWorker(t, pool, RealClock{})
	busy, small := &queue{w: w, name: "busy"}, &queue{w: w, name: "small"}
	k := min(claimBatchRequests, claimBatchRows/w.cfg.MaxClaimBatch)
	const busyClaimers = 2
	bound := int64((busyClaimers + k - 1) / k)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var busyClaimed atomic.Int64
	for range busyClaimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				rep := busy.sendClaim(ctx, busyBatch, allBandsAged(), false)
				if rep.err != nil || len(rep.rows) == 0 {
					return
				}
				busyClaimed.Add(int64(len(rep.rows)))
			}
		}()
	}
	// Let the busy queue's requests queue up first.
	for w.m.ClaimBatches.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	got := 0
	for got < smallJobs {
		rep := small.sendClaim(ctx, 1, allBandsAged(), false)
		require.NoError(t, rep.err)
		require.LessOrEqual(t, rep.behind, bound, "statements started after the small queue's request arrived that did not carry it")
		got += len(rep.rows)
	}
	left := busyJobs - busyClaimed.Load()
	close(stop)
	wg.Wait()
	t.Logf("small queue drained in %d requests; busy queue: %d of %d jobs still ready", smallJobs, left, busyJobs)
	require.Greater(t, left, int64(busyJobs/2), "the small queue waited for the busy one")
}

// A finisher's batch spans hundreds of queues when a worker serves hundreds of one-slot queues:
// settleTo groups it by queue in one pass (it split the rest off for each queue in turn,
// quadratic: 500 queues, ~4,500 allocations a batch), one send per queue, in order.
func TestSettleToGroupsInOnePass(t *testing.T) {
	const n = 500
	w := &Engine{}
	qs := make([]*queue, n)
	var ss []settled
	for i := range qs {
		qs[i] = &queue{settledCh: make(chan []settled, 1), done: make(chan struct{})}
	}
	for round := range 2 { // each queue twice, interleaved
		for i := range qs {
			ss = append(ss, settled{e: &Execution{q: qs[i], c: claimed{JobRow: &generics.JobRow{ID: int64(round*n + i)}}}})
		}
	}
	drain := func() {
		for i, q := range qs {
			got := <-q.settledCh
			if len(got) != 2 || got[0].e.c.ID != int64(i) || got[1].e.c.ID != int64(n+i) {
				t.Fatalf("queue %d got %d results", i, len(got))
			}
		}
	}
	w.settleTo(context.Background(), ss...)
	drain()
	allocs := testing.AllocsPerRun(5, func() {
		w.settleTo(context.Background(), ss...)
		drain()
	})
	require.Less(t, allocs, float64(3*n), "allocations for one batch over %d queues", n)
}

// A queue loop hands its plain ordered claims to the batcher itself (startBatched, no claim
// goroutine): the statement answers the loop on claimedCh with its claimer, its reservation
// and the rows it owns, and once the batcher has stopped a claim is answered at once with an
// error (the loop backs off) instead of waiting for a batcher that will never answer.
func TestClaimBatchAnswersTheLoop(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload) VALUES ('a', 'noop', '{}')`)
	require.NoError(t, err)
	w := &Engine{cfg: Config{ID: "batch-loop-test"}, eng: pool, q: gen.New(pool), sch: dbschema.Must(dbschema.Default), m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		kinds: claimKinds{names: []string{"noop"}, versions: []int32{1}, leaseMs: []int32{0}}, claimIn: newClaimIntake(), clk: RealClock{}}
	w.claimLog.Every = ErrorLogEvery
	bctx, stop := context.WithCancel(ctx)
	w.spawn(func() { w.claimBatcher(bctx) })
	q := &queue{w: w, name: "a", claimedCh: make(chan claimResult, 2), done: make(chan struct{})}
	plan := claimPlan{n: 2, segs: []Segment{{Priority: 2}}}
	q.startBatched(ctx, 1, plan)
	select {
	case r := <-q.claimedCh:
		require.NoError(t, r.err)
		require.Equal(t, 1, r.idx)
		require.Equal(t, 2, r.n)
		require.Len(t, r.got, 1)
		require.Equal(t, "a", r.got[0].Queue)
		require.Equal(t, "batch-loop-test", r.got[0].LockedBy)
		var state string
		require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM tenure.jobs WHERE id = $1`, r.got[0].ID).Scan(&state))
		require.Equal(t, "running", state)
	case <-time.After(20 * time.Second):
		t.Fatal("the batched claim never answered the loop")
	}

	stop()
	w.engWG.Wait()
	q.startBatched(ctx, 0, plan)
	select {
	case r := <-q.claimedCh:
		require.ErrorIs(t, r.err, errClaimBatcherGone)
		require.Empty(t, r.got)
	case <-time.After(20 * time.Second):
		t.Fatal("a claim after the batcher stopped was never answered")
	}
}

// The cohort linger never strands a request: after a statement that carried several requests,
// a lone request (fewer pending than the statement carried) still leaves once the linger ends,
// and the cohort's requests are all answered.
func TestClaimBatchLingerLetsALoneRequestGo(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload) SELECT q, 'noop', '{}' FROM unnest(ARRAY['a','b','c','a']) q`)
	require.NoError(t, err)
	w := &Engine{cfg: Config{ID: "batch-linger-test"}, eng: pool, q: gen.New(pool), sch: dbschema.Must(dbschema.Default), m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		kinds: claimKinds{names: []string{"noop"}, versions: []int32{1}, leaseMs: []int32{0}}, claimIn: newClaimIntake(), clk: RealClock{}}
	w.claimLog.Every = ErrorLogEvery
	bctx, stop := context.WithCancel(ctx)
	w.spawn(func() { w.claimBatcher(bctx) })
	defer func() { stop(); w.engWG.Wait() }()
	segs := []ClaimSeg{{Priority: 2, MaxUs: maxAgeUs(0)}}
	qs := map[string]*queue{"a": {w: w, name: "a"}, "b": {w: w, name: "b"}, "c": {w: w, name: "c"}}
	for round := range 3 {
		// A cohort: three queues' requests, answered by one or two statements.
		var wg sync.WaitGroup
		for _, q := range qs {
			wg.Go(func() {
				_, err := q.claimBatched(ctx, 1, segs, false)
				require.NoError(t, err)
			})
		}
		wg.Wait()
		// Then one request alone, at once: fewer pending than the statement carried.
		start := time.Now()
		_, err := qs["a"].claimBatched(ctx, 1, segs, false)
		require.NoError(t, err, "round %d", round)
		require.Less(t, time.Since(start), 20*time.Second)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state = 'running'`).Scan(&n))
	require.Equal(t, 4, n)
}
