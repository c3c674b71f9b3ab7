package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/engineconf"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// TestProfileWorkflowSettle (issue 30; bench/results/2026-12-04-workflow-settle.md) is a
// profile, not a check: it is skipped unless TENURE_SETTLE_PROFILE is set. In ONE backend (a
// pool of one connection) it inserts, claims and finishes, in batches of 30 in id order, the
// jobs of the shapes of bench/cmd/workflows and as many plain jobs, and sums the server-side
// cost of each step per 1,000 tasks: execution time, shared buffers hit/read/dirtied, WAL
// records/bytes/full pages (EXPLAIN (ANALYZE, BUFFERS, WAL) of a plpgsql wrapper running the
// statement on a cached generic plan, so the AFTER trigger and settle_jobs' nested statements
// are counted) and row
// versions written (pg_stat_xact_user_tables). The statements are the engine's and the
// client's own: InsertMany/InsertWorkflow's statements are captured by a tracer and replayed
// under EXPLAIN in a rolled-back transaction before the real insert; CompleteMany and
// NotifyDoneSettled/NotifyDoneMany are gen's texts; the session has the engine's settings
// (worker.EngineRuntimeParams), the inserts the client's defaults. The claim is an UPDATE setting what the engine's
// claim sets (state, token, owner, lease, attempts), not the claim statement itself.
//
//	TENURE_SETTLE_PROFILE=1 [TENURE_PROFILE_FANOUT=3000] [TENURE_PROFILE_WORKFLOWS=200] \
//	[TENURE_PROFILE_RELEASE=100000] go test -count=1 -run TestProfileWorkflowSettle -v ./jobs/
func TestProfileWorkflowSettle(t *testing.T) {
	if os.Getenv("TENURE_SETTLE_PROFILE") == "" {
		t.Skip("a profile: set TENURE_SETTLE_PROFILE=1 to run it")
	}
	envInt := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
			return v
		}
		return def
	}
	n := envInt("TENURE_PROFILE_FANOUT", 3000)
	w := envInt("TENURE_PROFILE_WORKFLOWS", 200)
	release := envInt("TENURE_PROFILE_RELEASE", 0)

	fan := func(n int, join bool) *jobs.Workflow {
		wf := jobs.NewWorkflow("fanout", nil)
		wf.Add("root", blobArgs{}, nil)
		names := make([]string, n)
		for i := range n {
			names[i] = "t" + strconv.Itoa(i)
			wf.Add(names[i], blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"root"}})
		}
		if join {
			wf.Add("join", blobArgs{}, &jobs.TaskOpts{DependsOn: names})
		}
		return wf
	}
	ten := func() *jobs.Workflow {
		wf := jobs.NewWorkflow("ten", nil)
		wf.Add("root", blobArgs{}, nil)
		mid := make([]string, 8)
		for i := range mid {
			mid[i] = "m" + strconv.Itoa(i)
			wf.Add(mid[i], blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"root"}})
		}
		wf.Add("join", blobArgs{}, &jobs.TaskOpts{DependsOn: mid})
		return wf
	}

	var out strings.Builder
	report := func(name string, tasks int, p *profile) {
		fmt.Fprintf(&out, "\n%s (%d tasks), per 1,000 tasks:\n%s", name, tasks, p.table(tasks))
	}
	{
		pr := newProfiler(t)
		p := pr.run(t, pr.insertPlain(t, n+2))
		report("plain, fan-out's count", n+2, p)
	}
	{
		pr := newProfiler(t)
		pr.firstRelease = true
		p := pr.run(t, pr.insertWorkflows(t, []*jobs.Workflow{fan(n, true)}))
		report(fmt.Sprintf("fan-out 1 -> %d -> 1", n), n+2, p)
	}
	{
		pr := newProfiler(t)
		p := pr.run(t, pr.insertPlain(t, w*10))
		report("plain, the 10-task workflows' count", w*10, p)
	}
	{
		pr := newProfiler(t)
		wfs := make([]*jobs.Workflow, w)
		for i := range wfs {
			wfs[i] = ten()
		}
		p := pr.run(t, pr.insertWorkflows(t, wfs))
		report(fmt.Sprintf("%d workflows of 10", w), w*10, p)
	}
	if release > 0 {
		pr := newProfiler(t)
		p := pr.insertWorkflows(t, []*jobs.Workflow{fan(release, true)})
		pr.finishBatch(t, p, pr.readyIDs(t, 1))
		fmt.Fprintf(&out, "\nthe root's finish releasing %d tasks (one CompleteMany), total:\n%s", release, p.table(1000))
	}
	t.Log(out.String())
	if f := os.Getenv("TENURE_PROFILE_OUT"); f != "" {
		require.NoError(t, os.WriteFile(f, []byte(out.String()), 0o644))
	}
}

// cost is what the server spent on one kind of statement, summed over its calls.
type cost struct {
	calls                        int
	ms                           float64
	hit, read, dirtied, written  int64
	walRecords, walFPI, walBytes int64
	ins, upd, hot, del           int64
	stmts                        int
}

type profile struct {
	order []string
	steps map[string]*cost
}

func (p *profile) add(step string, c cost) {
	if p.steps == nil {
		p.steps = map[string]*cost{}
	}
	s, ok := p.steps[step]
	if !ok {
		s = &cost{}
		p.steps[step] = s
		p.order = append(p.order, step)
	}
	s.calls++
	s.ms += c.ms
	s.hit += c.hit
	s.read += c.read
	s.dirtied += c.dirtied
	s.written += c.written
	s.walRecords += c.walRecords
	s.walFPI += c.walFPI
	s.walBytes += c.walBytes
	s.ins += c.ins
	s.upd += c.upd
	s.hot += c.hot
	s.del += c.del
}

func (p *profile) table(tasks int) string {
	var b strings.Builder
	k := 1000 / float64(tasks)
	fmt.Fprintf(&b, "| step | calls | ms | buffers hit | read | dirtied | WAL records | WAL kB | FPI | rows ins | upd (HOT) | del |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var tot cost
	line := func(name string, s *cost) {
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f (%.0f) | %.0f |\n", name, s.calls,
			s.ms*k, float64(s.hit)*k, float64(s.read)*k, float64(s.dirtied)*k, float64(s.walRecords)*k,
			float64(s.walBytes)*k/1024, float64(s.walFPI)*k, float64(s.ins)*k, float64(s.upd)*k, float64(s.hot)*k, float64(s.del)*k)
	}
	for _, name := range p.order {
		s := p.steps[name]
		line(name, s)
		tot.calls += s.calls
		tot.ms += s.ms
		tot.hit += s.hit
		tot.read += s.read
		tot.dirtied += s.dirtied
		tot.walRecords += s.walRecords
		tot.walBytes += s.walBytes
		tot.walFPI += s.walFPI
		tot.ins += s.ins
		tot.upd += s.upd
		tot.hot += s.hot
		tot.del += s.del
	}
	line("**total**", &tot)
	return b.String()
}

// tracer records the statements its connection runs while on.
type tracer struct {
	on   bool
	sqls []string
	args [][]any
}

func (r *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if r.on {
		r.sqls = append(r.sqls, d.SQL)
		r.args = append(r.args, d.Args)
	}
	return ctx
}

func (r *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type profiler struct {
	pool   *pgxpool.Pool
	tr     *tracer
	c      *jobs.Client
	tokens map[int64]uuid.UUID
	cmSQL  string
	ndsSQL string
	ndmSQL string
	// the next batch is a fan-out's root
	firstRelease bool
}

func newProfiler(t *testing.T) *profiler {
	tr := &tracer{}
	pool := pgtest.NewPoolWith(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1
		cfg.ConnConfig.Tracer = tr
		// the engine's session settings (worker.EngineRuntimeParams): its finishes, claims and
		// signals run with them; the inserts set the client's defaults back (measureInsert)
		for k, v := range engineconf.Settings {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	})
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		ALTER TABLE tenure.jobs SET (autovacuum_enabled = false);
		ALTER TABLE tenure.job_deps SET (autovacuum_enabled = false);
		ALTER TABLE tenure.job_dep_stripes SET (autovacuum_enabled = false);
`)
	require.NoError(t, err)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	p := &profiler{pool: pool, tr: tr, c: c, tokens: map[int64]uuid.UUID{}}
	// the statements' texts, from calls that change nothing
	tr.on = true
	_, err = gen.New(pool).CompleteMany(ctx, gen.CompleteManyParams{Ids: []int64{}, Tokens: []uuid.UUID{}, Outputs: [][]byte{}})
	require.NoError(t, err)
	_, err = gen.New(pool).NotifyDoneSettled(ctx, gen.NotifyDoneSettledParams{Payloads: []string{}, Settled: []int64{}})
	require.NoError(t, err)
	_, err = gen.New(pool).NotifyDoneMany(ctx, []string{})
	require.NoError(t, err)
	tr.on = false
	require.Len(t, tr.sqls, 3)
	p.cmSQL, p.ndsSQL, p.ndmSQL = tr.sqls[0], tr.sqls[1], tr.sqls[2]
	tr.sqls, tr.args = nil, nil
	// The wrappers EXPLAIN measures (a function call counts all its nested work, the trigger
	// included), each running the statement's text as a static statement: a plan cached on
	// its first call, generic (the engine's sessions, force_generic_plan), as the engine's
	// prepared statements are.
	q := func(sql string) string { return strings.TrimRight(strings.TrimSpace(sql), ";") }
	_, err = pool.Exec(ctx, `
		CREATE FUNCTION public.prof_cm(bigint[], uuid[], jsonb[], jsonb[], boolean[])
			RETURNS TABLE (id bigint, busy boolean, deleted boolean, settles boolean)
			LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $prof$
			#variable_conflict use_column
			BEGIN RETURN QUERY `+q(p.cmSQL)+`; END $prof$;
		CREATE FUNCTION public.prof_nds(text[], bigint[]) RETURNS SETOF bigint
			LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $prof$
			BEGIN RETURN QUERY `+q(p.ndsSQL)+`; END $prof$;
		CREATE FUNCTION public.prof_ndm(text[]) RETURNS SETOF bigint
			LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $prof$
			BEGIN RETURN QUERY `+q(p.ndmSQL)+`; END $prof$;
		CREATE FUNCTION public.prof_claim(bigint[]) RETURNS void
			LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $prof$
			BEGIN
				UPDATE tenure.jobs SET state = 'running', claim_token = gen_random_uuid(), locked_by = 'prof',
				       locked_until = now() + interval '1 hour', attempted_at = now(), attempts = attempts + 1,
				       generation = generation + 1
				WHERE id = ANY ($1) AND state = 'ready';
			END $prof$;`)
	require.NoError(t, err)
	return p
}

// explain runs sql (EXPLAIN (ANALYZE, BUFFERS, WAL)) on tx and returns its cost with the row
// versions tx has written so far minus before.
func (pr *profiler) explain(t *testing.T, tx pgx.Tx, sql string, args ...any) cost {
	ctx := context.Background()
	before := xactRows(t, tx)
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, WAL, TIMING OFF, FORMAT JSON) "+sql, args...).Scan(&raw))
	var plans []struct {
		Plan map[string]any `json:"Plan"`
		Exec float64        `json:"Execution Time"`
	}
	require.NoError(t, json.Unmarshal(raw, &plans))
	pl := plans[0].Plan
	num := func(k string) int64 { f, _ := pl[k].(float64); return int64(f) }
	after := xactRows(t, tx)
	return cost{ms: plans[0].Exec, hit: num("Shared Hit Blocks"), read: num("Shared Read Blocks"),
		dirtied: num("Shared Dirtied Blocks"), written: num("Shared Written Blocks"),
		walRecords: num("WAL Records"), walFPI: num("WAL FPI"), walBytes: num("WAL Bytes"),
		ins: after.ins - before.ins, upd: after.upd - before.upd, hot: after.hot - before.hot, del: after.del - before.del}
}

func xactRows(t *testing.T, tx pgx.Tx) cost {
	var c cost
	require.NoError(t, tx.QueryRow(context.Background(), `
		SELECT coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint,
		       coalesce(sum(n_tup_hot_upd), 0)::bigint, coalesce(sum(n_tup_del), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE schemaname = 'tenure'`).Scan(&c.ins, &c.upd, &c.hot, &c.del))
	return c
}

// measureInsert runs insert in a transaction with the tracer on and rolls it back, replays the
// captured statements under EXPLAIN in another (rolled back: edges need no existing job), then
// runs insert for real.
func (pr *profiler) measureInsert(t *testing.T, p *profile, insert func(tx pgx.Tx) error) {
	ctx := context.Background()
	begin := func() pgx.Tx {
		tx, err := pr.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = auto; SET LOCAL enable_seqscan = on; SET LOCAL jit = on`)
		require.NoError(t, err)
		return tx
	}
	tx := begin()
	pr.tr.on = true
	require.NoError(t, insert(tx))
	pr.tr.on = false
	require.NoError(t, tx.Rollback(ctx))
	sqls, args := pr.tr.sqls, pr.tr.args
	pr.tr.sqls, pr.tr.args = nil, nil
	tx = begin()
	for i, sql := range sqls {
		name := "insert: " + strings.TrimPrefix(strings.SplitN(sql, "\n", 2)[0], "-- name: ")
		p.add(name, pr.explain(t, tx, sql, args[i]...))
	}
	require.NoError(t, tx.Rollback(ctx))
	tx = begin()
	require.NoError(t, insert(tx))
	require.NoError(t, tx.Commit(ctx))
}

func (pr *profiler) insertPlain(t *testing.T, n int) *profile {
	p := &profile{}
	for start := 0; start < n; start += 5000 {
		ps := make([]jobs.InsertManyParams, 0, 5000)
		for range min(n, start+5000) - start {
			ps = append(ps, jobs.InsertManyParams{Args: blobArgs{}})
		}
		pr.measureInsert(t, p, func(tx pgx.Tx) error {
			_, err := pr.c.InsertManyTx(context.Background(), tx, ps)
			return err
		})
	}
	return p
}

func (pr *profiler) insertWorkflows(t *testing.T, wfs []*jobs.Workflow) *profile {
	p := &profile{}
	for _, wf := range wfs {
		pr.measureInsert(t, p, func(tx pgx.Tx) error {
			_, err := pr.c.InsertWorkflowTx(context.Background(), tx, wf)
			return err
		})
	}
	return p
}

func (pr *profiler) readyIDs(t *testing.T, limit int) []int64 {
	rows, err := pr.pool.Query(context.Background(),
		`SELECT id FROM tenure.jobs WHERE state = 'ready' ORDER BY priority DESC, run_at, id LIMIT $1`, limit)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

// finishBatch claims ids (one transaction), completes them (CompleteMany, the trigger
// settling, in another) and sends their done signals as the engine does (autocommitted).
func (pr *profiler) finishBatch(t *testing.T, p *profile, ids []int64) {
	ctx := context.Background()
	tx, err := pr.pool.Begin(ctx)
	require.NoError(t, err)
	p.add("claim (UPDATE like the claim's)", pr.explain(t, tx, `SELECT public.prof_claim($1)`, ids))
	rows, err := tx.Query(ctx, `SELECT id, claim_token FROM tenure.jobs WHERE id = ANY ($1)`, ids)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var tok uuid.UUID
		require.NoError(t, rows.Scan(&id, &tok))
		pr.tokens[id] = tok
	}
	require.NoError(t, rows.Err())
	require.NoError(t, tx.Commit(ctx))

	slices.Sort(ids)
	toks := make([]uuid.UUID, len(ids))
	outs := make([][]byte, len(ids))
	for i, id := range ids {
		toks[i], outs[i] = pr.tokens[id], []byte("null")
	}
	tx, err = pr.pool.Begin(ctx)
	require.NoError(t, err)
	step := "finish: CompleteMany + settle"
	if len(ids) == 1 && pr.firstRelease {
		step = "finish of the root (its release)"
	}
	pr.firstRelease = false
	p.add(step, pr.explain(t, tx, `SELECT count(*) FROM public.prof_cm($1, $2, $3, NULL, NULL)`, ids, toks, outs))
	var settled []int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM tenure.jobs WHERE id = ANY ($1) AND has_dependents`, ids).Scan(&settled))
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE id = ANY ($1) AND state = 'succeeded'`, ids).Scan(&n))
	require.Equal(t, len(ids), n)
	require.NoError(t, tx.Commit(ctx))

	payloads := []string{strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ids)), ","), "[]")}
	tx, err = pr.pool.Begin(ctx)
	require.NoError(t, err)
	if len(settled) > 0 {
		p.add("done signal: NotifyDoneSettled", pr.explain(t, tx, `SELECT count(*) FROM public.prof_nds($1, $2)`, payloads, settled))
	} else {
		p.add("done signal: NotifyDoneMany", pr.explain(t, tx, `SELECT count(*) FROM public.prof_ndm($1)`, payloads))
	}
	require.NoError(t, tx.Commit(ctx))
}

// run finishes every job, the ready ones in batches of 30 in claim order, until none is left,
// after VACUUM ANALYZE tenure.jobs as bench/cmd/workflows runs before its drains.
func (pr *profiler) run(t *testing.T, p *profile) *profile {
	_, err := pr.pool.Exec(context.Background(), `VACUUM ANALYZE tenure.jobs`)
	require.NoError(t, err)
	for {
		ids := pr.readyIDs(t, 30)
		if len(ids) == 0 {
			break
		}
		pr.finishBatch(t, p, ids)
	}
	var left int
	require.NoError(t, pr.pool.QueryRow(context.Background(), `SELECT count(*) FROM tenure.jobs WHERE state <> 'succeeded'`).Scan(&left))
	require.Zero(t, left)
	return p
}
