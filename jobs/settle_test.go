package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// runTasks moves a workflow's ready tasks to running as a claim would (token, owner, lease)
// and returns their claim tokens by id.
func runTasks(t *testing.T, pool *pgxpool.Pool, wf uuid.UUID) map[int64]uuid.UUID {
	t.Helper()
	rows, err := pool.Query(context.Background(), `UPDATE tenure.jobs
		SET state = 'running', claim_token = gen_random_uuid(), locked_by = 'test', locked_until = now() + interval '1 hour',
		    attempted_at = now(), attempts = 1, generation = 1
		WHERE workflow_id = $1 AND state = 'ready' RETURNING id, claim_token`, wf)
	require.NoError(t, err)
	tokens := map[int64]uuid.UUID{}
	for rows.Next() {
		var id int64
		var tok uuid.UUID
		require.NoError(t, rows.Scan(&id, &tok))
		tokens[id] = tok
	}
	require.NoError(t, rows.Err())
	return tokens
}

// completeMany runs the engine's batched completion (db/queries.sql CompleteMany) of ids, sorted
// as the engine sorts them, on tx.
func completeMany(ctx context.Context, tx pgx.Tx, ids []int64, tokens map[int64]uuid.UUID) (int, error) {
	ids = slices.Sorted(slices.Values(ids))
	toks := make([]uuid.UUID, len(ids))
	outs := make([][]byte, len(ids))
	for i, id := range ids {
		toks[i], outs[i] = tokens[id], []byte("null")
	}
	rows, err := gen.New(tx).CompleteMany(ctx, gen.CompleteManyParams{Ids: ids, Tokens: toks, Outputs: outs})
	n := 0
	for _, r := range rows {
		if !r.Busy {
			n++
		}
	}
	return n, err
}

// TestSettleOncePerStatement: a statement that finishes many dependencies of one dependent
// decrements it once, by their number (migration 0026): CompleteMany of 20 tasks writes one new
// version of the join they all feed and one of a second join fed by 10 of them, not 30. The
// trigger of 0020 settled each finished row by itself: 20 + 10 versions.
func TestSettleOncePerStatement(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("fan-in", nil)
	var all, half []string
	for i := range 20 {
		name := fmt.Sprintf("t%02d", i)
		wf.Add(name, blobArgs{}, nil)
		all = append(all, name)
		if i < 10 {
			half = append(half, name)
		}
	}
	wf.Add("late", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"t00"}, InsertOpts: jobs.InsertOpts{Queue: "other"}})
	wf.Add("join", blobArgs{}, &jobs.TaskOpts{DependsOn: all})
	wf.Add("half", blobArgs{}, &jobs.TaskOpts{DependsOn: append(half, "late")})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	tokens := runTasks(t, pool, wf.ID())
	require.Len(t, tokens, 20)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var ids []int64
	for id := range tokens {
		ids = append(ids, id)
	}
	// The counter also holds the session's earlier transactions not yet reported (reports
	// happen outside a transaction only): the difference is this statement's.
	updates := func() (n int64) {
		t.Helper()
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('tenure.jobs'::regclass)`).Scan(&n))
		return n
	}
	before := updates()
	n, err := completeMany(ctx, tx, ids, tokens)
	require.NoError(t, err)
	require.Equal(t, 20, n)
	updated := updates() - before
	require.NoError(t, tx.Commit(ctx))
	// 20 completions, late released (t00), join released, half decremented by 10.
	require.EqualValues(t, 20+1+1+1, updated, "row versions written by the completion of 20 tasks")

	for task, want := range map[string]struct {
		state   string
		pending int
	}{"late": {"ready", 0}, "join": {"ready", 0}, "half": {"waiting", 1}} {
		var st string
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT state::text, deps_pending FROM tenure.jobs WHERE id = $1`,
			res.Tasks[task].ID).Scan(&st, &pending))
		require.Equal(t, want.state, st, task)
		require.Equal(t, want.pending, pending, task)
	}
	var unresolved int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.job_deps WHERE NOT resolved`).Scan(&unresolved))
	require.Equal(t, 1, unresolved, "only late -> half is left")
}

// TestSettleRacingFinishesReleaseOnce: eight sessions finish the tasks of one workflow in
// random batches (CompleteMany in a transaction, a fifth of them rolled back and finished again
// later), while each task feeds one to three of twelve joins, so the last dependencies of a
// join are finished by concurrent transactions that each decrement it by a different count.
// No two of them deadlock (the trigger of 0020 did: it fails here). Every join is released
// exactly once (a test trigger logs each waiting -> ready move with its transaction: one row
// per join, from a committed transaction that finished one of its dependencies), none is lost
// (all ready, deps_pending 0, every edge resolved), and a rolled-back finish released nothing.
func TestSettleRacingFinishesReleaseOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 10 })
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		CREATE TABLE release_log (job_id bigint, state text, txid bigint);
		CREATE FUNCTION log_release() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO release_log VALUES (NEW.id, NEW.state::text, txid_current());
			RETURN NULL;
		END $$;
		CREATE TRIGGER log_release AFTER UPDATE ON tenure.jobs FOR EACH ROW
			WHEN (OLD.state::text = 'waiting' AND NEW.state::text <> 'waiting') EXECUTE FUNCTION log_release();`)
	require.NoError(t, err)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	const tasks, joins, sessions = 600, 12, 8
	rng := rand.New(rand.NewPCG(30, 26))
	wf := jobs.NewWorkflow("race", nil)
	deps := make([][]string, joins)
	for i := range tasks {
		name := fmt.Sprintf("t%03d", i)
		wf.Add(name, blobArgs{}, nil)
		for _, j := range rng.Perm(joins)[:1+rng.IntN(3)] {
			deps[j] = append(deps[j], name)
		}
	}
	for j := range joins {
		wf.Add(fmt.Sprintf("join%02d", j), blobArgs{}, &jobs.TaskOpts{DependsOn: deps[j]})
	}
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	tokens := runTasks(t, pool, wf.ID())
	require.Len(t, tokens, tasks)

	var mu sync.Mutex
	left := make([]int64, 0, tasks)
	for id := range tokens {
		left = append(left, id)
	}
	rng.Shuffle(len(left), func(i, j int) { left[i], left[j] = left[j], left[i] })
	finishedBy := map[int64]int64{} // task -> committed txid that finished it
	retries := 0
	take := func(r *rand.Rand) []int64 {
		mu.Lock()
		defer mu.Unlock()
		n := min(len(left), 1+r.IntN(24))
		b := slices.Clone(left[len(left)-n:])
		left = left[:len(left)-n]
		return b
	}
	giveBack := func(b []int64) { mu.Lock(); left = append(left, b...); mu.Unlock() }
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(s), 7))
			idle := 0
			for idle < 50 {
				b := take(r)
				if len(b) == 0 {
					idle++ // another session may still give a batch back
					continue
				}
				idle = 0
				err := func() error {
					tx, err := pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(ctx)
					n, err := completeMany(ctx, tx, b, tokens)
					if err != nil {
						return err
					}
					if n != len(b) {
						return fmt.Errorf("batch of %d completed %d", len(b), n)
					}
					if r.IntN(5) == 0 { // rolled back, then finished again by any session
						err := tx.Rollback(ctx)
						giveBack(b)
						return err
					}
					var txid int64
					if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&txid); err != nil {
						return err
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					mu.Lock()
					for _, id := range b {
						finishedBy[id] = txid
					}
					mu.Unlock()
					return nil
				}()
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "40P01" { // a deadlock is retried, as the engine does
					mu.Lock()
					retries++
					mu.Unlock()
					giveBack(b)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, finishedBy, tasks, "every task finished once")
	// Each settling statement locks the dependents it decrements in id order, so finishes that
	// feed the same joins wait for each other but never deadlock. The trigger of 0020 settled
	// row by row, locking the joins in the order of the finished tasks: 63 deadlocks in the
	// first 40 s of this test (each detected after deadlock_timeout, then retried).
	require.Zero(t, retries, "deadlocks between finishing transactions")

	type logged struct {
		state string
		txid  int64
	}
	log := map[int64][]logged{}
	rows, err := pool.Query(ctx, `SELECT job_id, state, txid FROM release_log`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var l logged
		require.NoError(t, rows.Scan(&id, &l.state, &l.txid))
		log[id] = append(log[id], l)
	}
	require.NoError(t, rows.Err())
	require.Len(t, log, joins, "only the joins left waiting")
	for j := range joins {
		name := fmt.Sprintf("join%02d", j)
		id := res.Tasks[name].ID
		var st string
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT state::text, deps_pending FROM tenure.jobs WHERE id = $1`, id).Scan(&st, &pending))
		require.Equal(t, "ready", st, name)
		require.Zero(t, pending, name)
		require.Len(t, log[id], 1, "%s released exactly once: %v", name, log[id])
		require.Equal(t, "ready", log[id][0].state, name)
		byRelease := false
		for _, d := range deps[j] {
			byRelease = byRelease || finishedBy[res.Tasks[d].ID] == log[id][0].txid
		}
		require.True(t, byRelease, "%s released by transaction %d, which finished none of its dependencies", name, log[id][0].txid)
	}
	var unresolved int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.job_deps WHERE NOT resolved`).Scan(&unresolved))
	require.Zero(t, unresolved)
}
