package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/worker"
)

type doneOK struct {
	N int `json:"n"`
}

func (doneOK) Kind() string        { return "done_ok" }
func (doneOK) PayloadVersion() int { return 1 }

type doneGone struct {
	N int `json:"n"`
}

func (doneGone) Kind() string        { return "done_gone" }
func (doneGone) PayloadVersion() int { return 1 }

type doneDead struct {
	N int `json:"n"`
}

func (doneDead) Kind() string        { return "done_dead" }
func (doneDead) PayloadVersion() int { return 1 }

// notifyTracer records every statement an engine pool sends that notifies, and whether it was
// sent on its own (an autocommitted statement) or in a pipeline (a claim's transaction).
type notifyTracer struct {
	stmtTracer
	mu    sync.Mutex
	alone []string
	inTx  []string
}

func (n *notifyTracer) note(sql string, alone bool) {
	if !strings.Contains(sql, "pg_notify(") {
		return
	}
	first, _, _ := strings.Cut(sql, "\n")
	n.mu.Lock()
	defer n.mu.Unlock()
	if alone {
		n.alone = append(n.alone, first)
	} else {
		n.inTx = append(n.inTx, first)
	}
}

// TestDoneSignalAfterTheCommit: the done signal of every job the engine ends (succeeded,
// deleted on success, dead by its handler, dead by the lease sweep) reaches a listener, and no
// statement the engine runs in a transaction that writes notifies: the only notifying statement
// it sends is NotifyDoneMany, on its own, after the commit. A NOTIFY in a writing transaction
// holds PostgreSQL's one notification-queue lock through that transaction's WAL flush, so the
// fleet's finishes and claims queued behind each other's fsyncs (docs/design.md, "The done
// signal after the commit"). Before, CompleteMany, FailMany, ReleaseMany and SnoozeMany each
// carried a pg_notify, alone or riding on claims.
func TestDoneSignalAfterTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	tr := &notifyTracer{}
	tr.onQuery = func(_ *pgx.Conn, sql string) { tr.note(sql, true) }
	tr.onBatch = func(_ *pgx.Conn, sqls []string) {
		for _, q := range sqls {
			tr.note(q, false)
		}
	}

	listen, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listen.Release()
	_, err = listen.Exec(ctx, "LISTEN tenure_done")
	require.NoError(t, err)

	rec := &recorder{}
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 8, Claimers: 1}})
	cfg.EnginePool = tracedEnginePool(t, pool, &tr.stmtTracer)
	cfg.OnOutcome = rec.outcome
	cfg.ReclaimEvery = time.Hour // the test runs the sweep itself
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[doneOK]) error { return nil }, nil)
	worker.MustRegister(w, func(context.Context, *generics.Job[doneGone]) error { return nil },
		&worker.HandlerOptions{DeleteOnSuccess: true})
	worker.MustRegister(w, func(context.Context, *generics.Job[doneDead]) error {
		return worker.Permanent(errors.New("no"))
	}, nil)
	c := newClient(t, pool, w)

	want := map[string]bool{}
	const each = 40
	for i := range each {
		r, err := c.Insert(ctx, doneOK{N: i}, nil)
		require.NoError(t, err)
		want[fmt.Sprint(r.Job.ID)] = true
		r, err = c.Insert(ctx, doneGone{N: i}, nil)
		require.NoError(t, err)
		want[fmt.Sprintf("s%d", r.Job.ID)] = true
		r, err = c.Insert(ctx, doneDead{N: i}, nil)
		require.NoError(t, err)
		want[fmt.Sprint(r.Job.ID)] = true
	}
	// A job whose owner died on its last attempt: the lease sweep ends it dead.
	r, err := c.Insert(ctx, doneOK{N: -1}, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'running', attempts = max_attempts, generation = 1,
		claim_token = gen_random_uuid(), locked_by = 'gone', attempted_at = now(), locked_until = now() - interval '1 minute'
		WHERE id = $1`, r.Job.ID)
	require.NoError(t, err)
	want[fmt.Sprint(r.Job.ID)] = true

	startWorker(t, w)
	waitFor(t, 30*time.Second, "every outcome", func() bool { _, o := rec.snapshot(); return len(o) == 3*each })
	n, err := w.ReclaimExpired(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	got := map[string]bool{}
	for len(got) < len(want) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		nt, err := listen.Conn().WaitForNotification(wctx)
		cancel()
		require.NoError(t, err, "done signals missing: have %d of %d", len(got), len(want))
		for _, e := range strings.Split(nt.Payload, ",") {
			require.True(t, want[e], "a done entry for no job the engine ended: %q", e)
			got[e] = true
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	require.Empty(t, tr.inTx, "a statement notifies inside a claim's transaction")
	require.NotEmpty(t, tr.alone)
	for _, s := range tr.alone {
		require.Contains(t, s, "name: NotifyDoneMany", "only the done signal's own statement notifies")
	}
}
