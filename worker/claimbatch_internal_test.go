package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
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
	w := &Worker{cfg: Config{ID: "batch-test"}, eng: pool, q: gen.New(pool), sch: dbschema.Must(dbschema.Default), m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		kinds: claimKinds{names: []string{"noop"}, versions: []int32{1}, leaseMs: []int32{0}}, claimReqCh: make(chan *claimReq, 4), clk: realClock{}}
	w.claimLog.every = errorLogEvery
	bctx, stop := context.WithCancel(ctx)
	w.spawn(func() { w.claimBatcher(bctx) })
	defer func() { stop(); w.engWG.Wait() }()
	segs := []claimSeg{{priority: 2, maxUs: maxAgeUs(0)}}
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
			WHERE query LIKE '-- name: ClaimOrderedMany%' AND wait_event_type = 'Lock'`).Scan(&n))
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
	rows, err := (&afterLock{pool: pool, sch: dbschema.Must(dbschema.Default), locks: noBitmap}).Query(ctx, "SELECT current_setting('enable_bitmapscan')")
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
