package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// oldGuideGrants are the application role's grants docs/guide.md §10 listed before migration
// 0017 (tenure.grant_worker): nothing on tenure.flow, flow_grant or flow_permit.
var oldGuideGrants = []string{
	`GRANT USAGE ON SCHEMA tenure TO {role}`,
	`GRANT SELECT, INSERT, UPDATE, DELETE ON tenure.jobs TO {role}`,
	`GRANT SELECT, INSERT, UPDATE, DELETE ON tenure.effects TO {role}`,
	`GRANT SELECT, INSERT ON tenure.audit TO {role}`,
	`GRANT SELECT, INSERT, UPDATE, DELETE ON tenure.workers TO {role}`,
	`GRANT SELECT ON tenure.schema_migrations TO {role}`,
	`GRANT SELECT, INSERT, UPDATE ON tenure.periodic TO {role}`,
	`GRANT SELECT, INSERT, UPDATE ON tenure.queues TO {role}`,
}

// limitedConfig is a worker serving a queue with a small concurrency limit (permit mode).
func limitedConfig() *worker.Config {
	return fastConfig(map[string]worker.QueueConfig{
		"lim": {Concurrency: 4, Limits: []worker.Limit{{Kind: "lim", MaxRunning: 2}}},
	})
}

// TestStartRefusesOldGuideGrants (issue 29, item 11): a worker with Limits under the role of the
// old guide §10 grants used to start without error, then fail every claim with "permission
// denied for table flow_permit" (logged as WARN) and run none of its jobs. Start now refuses it
// with ErrPermission, naming every missing privilege and tenure.grant_worker.
func TestStartRefusesOldGuideGrants(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	role := pgtest.NewRole(t, pool, oldGuideGrants...)
	rp := pgtest.RolePool(t, pool, role, 4)
	c := newClient(t, rp, nil)
	for i := range 5 {
		_, err := c.Insert(ctx, limArgs{N: i}, &jobs.InsertOpts{Queue: "lim"})
		require.NoError(t, err)
	}

	w, err := worker.New(rp, limitedConfig())
	require.NoError(t, err)
	var ran atomic.Int64
	worker.MustRegister(w, func(context.Context, *generics.Job[limArgs]) error { ran.Add(1); return nil }, &worker.HandlerOptions{Queue: "lim"})
	err = w.Start(ctx)
	if err == nil {
		// What the issue saw: the worker runs, and its queue is stuck.
		time.Sleep(2 * time.Second)
		st := w.Stats()
		_ = stopWorker(t, w, 5*time.Second)
		t.Fatalf("Start succeeded under the old guide's grants; in 2 s it ran %d of 5 jobs, claim errors %d, last error %q",
			ran.Load(), st.ClaimErrors, st.LastError)
	}
	require.ErrorIs(t, err, worker.ErrPermission)
	var pe *worker.PermissionError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, role, pe.Role)
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{
		"SELECT, INSERT, UPDATE on tenure.flow_grant (Limits of queue(s) lim)",
		"SELECT, INSERT, UPDATE, DELETE on tenure.flow_permit (Limits of queue(s) lim)",
		"SELECT, UPDATE, DELETE on tenure.flow (the flow prune)",
		"INSERT on tenure.flow (Limits of queue(s) lim)",
		// tenure.kinds came with migration 0018, after that guide.
		"SELECT, INSERT, UPDATE, DELETE on tenure.kinds (publishing kind defaults)",
		// tenure.job_deps came with migration 0020 (workflows and sequences).
		"SELECT, UPDATE on tenure.job_deps (finishes release workflow and sequence dependents)",
		"DELETE on tenure.job_deps (retention pruning)",
		// tenure.job_dep_stripes came with migration 0028 (striped joins).
		"SELECT, UPDATE on tenure.job_dep_stripes (finishes count down large fan-ins (striped joins))",
		"DELETE on tenure.job_dep_stripes (retention pruning)",
		// the pruning of tenure.sequences came with migration 0023.
		"SELECT, UPDATE, DELETE on tenure.sequences (retention pruning)",
		// tenure.workflows came with migration 0031.
		"SELECT, DELETE on tenure.workflows (retention pruning)",
		"SELECT tenure.grant_worker('" + role + "')",
	} {
		require.Contains(t, msg, want)
	}
	require.Len(t, pe.Missing, 11, "only the flow tables, tenure.kinds, tenure.job_deps, tenure.job_dep_stripes, tenure.sequences and tenure.workflows are missing: %v", pe.Missing)
	require.Zero(t, ran.Load())

	// The function the error names fixes it.
	_, err = pool.Exec(ctx, "SELECT tenure.grant_worker('"+role+"')")
	require.NoError(t, err)
	w2, err := worker.New(rp, limitedConfig())
	require.NoError(t, err)
	worker.MustRegister(w2, func(context.Context, *generics.Job[limArgs]) error { ran.Add(1); return nil }, &worker.HandlerOptions{Queue: "lim"})
	startWorker(t, w2)
	waitFor(t, 30*time.Second, "the 5 jobs to run", func() bool { return countState(t, pool, "succeeded") == 5 })
	require.Zero(t, w2.Stats().ClaimErrors)
	require.Zero(t, w2.Stats().PermissionErrors)
}

// fullConfig uses every feature whose tables Start checks: limits (permit mode), periodic
// schedules, the worker registry and retention pruning.
func fullConfig() *worker.Config {
	cfg := limitedConfig()
	cfg.Periodic = []worker.PeriodicJob{worker.NewPeriodicJob("hourly", worker.Every(time.Hour),
		func(context.Context, worker.Tick) (noopArgs, error) { return noopArgs{}, nil }, nil)}
	return cfg
}

// TestGrantWorkerCoversStartCheck: tenure.grant_worker and Start's check agree, both ways, for
// the class of every privilege grant_worker grants. Under grant_worker a worker using every
// feature starts; with any one of grant_worker's privileges on an engine table revoked (or USAGE
// on the schema), Start fails with ErrPermission naming that privilege and table. The
// tenurenats tables (outbox, stream_effects) are not the engine's: revoking them does not stop
// Start.
func TestGrantWorkerCoversStartCheck(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	role := pgtest.NewRole(t, pool, "SELECT tenure.grant_worker('{role}')")
	rp := pgtest.RolePool(t, pool, role, 4)
	start := func() error {
		t.Helper()
		w, err := worker.New(rp, fullConfig())
		require.NoError(t, err)
		worker.MustRegister(w, func(context.Context, *generics.Job[limArgs]) error { return nil }, &worker.HandlerOptions{Queue: "lim"})
		worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, &worker.HandlerOptions{Queue: "lim"})
		if err := w.Start(ctx); err != nil {
			return err
		}
		return stopWorker(t, w, 10*time.Second)
	}
	require.NoError(t, start(), "a worker using every feature starts under tenure.grant_worker")

	rows, err := pool.Query(ctx, `SELECT table_name::text, privilege_type::text FROM information_schema.role_table_grants
		WHERE grantee = $1 AND table_schema = 'tenure' ORDER BY 1, 2`, role)
	require.NoError(t, err)
	type grant struct{ table, priv string }
	grants, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (grant, error) {
		var g grant
		return g, r.Scan(&g.table, &g.priv)
	})
	require.NoError(t, err)
	require.Len(t, grants, 51, "grant_worker's privileges: %v", grants)
	for _, g := range grants {
		_, err := pool.Exec(ctx, fmt.Sprintf("REVOKE %s ON tenure.%s FROM %s", g.priv, g.table, role))
		require.NoError(t, err)
		err = start()
		if g.table == "outbox" || g.table == "stream_effects" {
			require.NoError(t, err, "without %s on tenure.%s", g.priv, g.table)
		} else {
			require.ErrorIs(t, err, worker.ErrPermission, "without %s on tenure.%s", g.priv, g.table)
			var pe *worker.PermissionError
			require.ErrorAs(t, err, &pe)
			require.Len(t, pe.Missing, 1, "%v", pe.Missing)
			require.Regexp(t, `(^|, )`+g.priv+`(, .*)? on tenure\.`+g.table+` \(`, pe.Missing[0])
		}
		_, err = pool.Exec(ctx, fmt.Sprintf("GRANT %s ON tenure.%s TO %s", g.priv, g.table, role))
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, "REVOKE USAGE ON SCHEMA tenure FROM "+role)
	require.NoError(t, err)
	err = start()
	require.ErrorIs(t, err, worker.ErrPermission)
	require.Contains(t, err.Error(), "USAGE on schema tenure")
}

// isDenied reports whether err is insufficient_privilege.
func isDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// requireDenied runs each statement on db and requires insufficient_privilege.
func requireDenied(t *testing.T, db *pgxpool.Pool, who string, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := db.Exec(context.Background(), s)
		require.True(t, isDenied(err), "%s must not be able to run %s; got %v", who, s, err)
	}
}

// TestFeatureSetUnderRoles (issue 29, item 11): the feature set runs under the roles the grant
// functions make, each with only its own surface. An enqueuer role inserts plain, unique and
// SQL-enqueued jobs; an operator role pauses and resumes a queue and cancels, re-injects and
// deletes jobs (audited); a worker role runs limited queues (permit claims, for a small and a
// large limit, and keyed-rate claims, RetryAfter pauses), a paused queue, a periodic schedule,
// effects, retention and flow pruning and the registry; a reader role reads. None of the engine's statements is refused.
// (tenurenats' own statements, the outbox relay's and the JetStream ledger's, are checked
// under these roles by its TestStatementsUnderGrantRoles.) Then what each role must not do:
// the worker and enqueuer roles cannot write tenure.audit, the enqueuer and reader roles
// cannot change a job's state, no role can update or delete audit rows.
func TestFeatureSetUnderRoles(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	wrole := pgtest.NewRole(t, pool, "SELECT tenure.grant_worker('{role}')")
	orole := pgtest.NewRole(t, pool, "SELECT tenure.grant_operator('{role}')")
	erole := pgtest.NewRole(t, pool, "SELECT tenure.grant_enqueuer('{role}')")
	rrole := pgtest.NewRole(t, pool, "SELECT tenure.grant_reader('{role}')")
	wp := pgtest.RolePool(t, pool, wrole, 8)
	op := pgtest.RolePool(t, pool, orole, 2)
	ep := pgtest.RolePool(t, pool, erole, 2)
	rp := pgtest.RolePool(t, pool, rrole, 2)

	cfg := fastConfig(map[string]worker.QueueConfig{
		"permits": {Concurrency: 4, Limits: []worker.Limit{{Kind: "lim", MaxRunning: 2}}},
		"large":   {Concurrency: 4, Limits: []worker.Limit{{Kind: "lim", MaxRunning: 5000}}},
		"keyed":   {Concurrency: 4, Limits: []worker.Limit{{Kind: "lim", PerKey: true, MaxRunning: 1, Rate: 1000, Per: time.Second, RetryAfterPauses: true}}},
		"paused":  {Concurrency: 2},
		"default": {Concurrency: 4},
	})
	cfg.PruneEvery = 100 * time.Millisecond
	cfg.FinishedRetention = time.Hour
	cfg.RegistryEvery = 100 * time.Millisecond
	cfg.Periodic = []worker.PeriodicJob{worker.NewPeriodicJob("every-second", worker.Every(time.Second),
		func(context.Context, worker.Tick) (noopArgs, error) { return noopArgs{N: -1}, nil },
		&worker.PeriodicOptions{RunOnStart: true})}
	w, err := worker.New(wp, cfg)
	require.NoError(t, err)
	var retried sync.Map
	worker.MustRegister(w, func(_ context.Context, job *generics.Job[limArgs]) error {
		if job.Args.N == 1 {
			if _, again := retried.LoadOrStore(job.ID, true); !again {
				return worker.RetryAfter(errors.New("slow down"), 10*time.Millisecond)
			}
		}
		return nil
	}, &worker.HandlerOptions{Queue: "permits", Retry: fastRetry})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[effArgs]) error {
		_, err := worker.Effect(ctx, job.JobRow, "charge", func(context.Context, worker.EffectCall) (string, error) { return "ok", nil })
		return err
	}, &worker.HandlerOptions{Retry: fastRetry})
	worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)

	// The enqueuer: plain, unique and SQL-enqueued jobs.
	ec := newClient(t, ep, w)
	var ids []int64
	for _, q := range []string{"permits", "large", "keyed"} {
		for i := range 4 {
			r, err := ec.Insert(ctx, limArgs{N: i, Key: fmt.Sprintf("k%d", i%2)}, &jobs.InsertOpts{Queue: q})
			require.NoError(t, err)
			ids = append(ids, r.Job.ID)
		}
	}
	for i := range 3 {
		r, err := ec.Insert(ctx, effArgs{Tag: fmt.Sprint(i)}, nil)
		require.NoError(t, err)
		ids = append(ids, r.Job.ID)
	}
	u1, err := ec.Insert(ctx, noopArgs{N: 7}, &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}})
	require.NoError(t, err)
	u2, err := ec.Insert(ctx, noopArgs{N: 7}, &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}})
	require.NoError(t, err)
	require.True(t, u2.Duplicate)
	require.Equal(t, u1.Job.ID, u2.Job.ID)
	ids = append(ids, u1.Job.ID)
	many, err := ec.InsertMany(ctx, []jobs.InsertManyParams{
		{Args: noopArgs{N: 8}, Opts: &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}},
		{Args: noopArgs{N: 8}, Opts: &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}},
	})
	require.NoError(t, err)
	require.True(t, many[1].Duplicate)
	ids = append(ids, many[0].Job.ID)
	var sqlID int64
	var dup bool
	require.NoError(t, ep.QueryRow(ctx, `SELECT id, duplicate FROM tenure.enqueue('noop', '{"n": 9}', unique_args => '{}')`).Scan(&sqlID, &dup))
	require.False(t, dup)
	require.NoError(t, ep.QueryRow(ctx, `SELECT id, duplicate FROM tenure.enqueue('noop', '{"n": 9}', unique_args => '{}')`).Scan(&sqlID, &dup))
	require.True(t, dup)
	ids = append(ids, sqlID)

	// The operator pauses a queue before the worker starts; its job waits.
	oc := newClient(t, op, nil)
	act := jobs.Action{Actor: "ops@example", Reason: "least-privilege test"}
	_, err = oc.PauseQueue(ctx, "paused", act)
	require.NoError(t, err)
	pj, err := ec.Insert(ctx, noopArgs{N: 10}, &jobs.InsertOpts{Queue: "paused"})
	require.NoError(t, err)
	later, err := ec.Insert(ctx, noopArgs{N: 11}, &jobs.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)

	startWorker(t, w)
	waitFor(t, 60*time.Second, "the jobs to succeed", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE id = ANY($1) AND state = 'succeeded'`, ids).Scan(&n))
		return n == len(ids)
	})
	waitFor(t, 30*time.Second, "a periodic job", func() bool { return w.Stats().PeriodicEnqueued >= 1 })
	require.Equal(t, []string{"paused"}, w.Stats().PausedQueues)
	j, err := oc.Get(ctx, pj.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, j.State, "a paused queue's job waits")
	_, err = oc.ResumeQueue(ctx, "paused", act)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the paused queue's job after resume", func() bool {
		j, err := oc.Get(ctx, pj.Job.ID)
		return err == nil && j.State == generics.JobStateSucceeded
	})
	out, err := oc.Cancel(ctx, later.Job.ID, act)
	require.NoError(t, err)
	require.Equal(t, jobs.Cancelled, out)
	_, err = oc.Reinject(ctx, later.Job.ID, act, nil)
	require.Error(t, err, "a cancelled job is not dead")
	require.NoError(t, oc.Delete(ctx, later.Job.ID, act))
	var effects int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.effects`).Scan(&effects))
	require.Equal(t, 3, effects)

	// The reader reads what the dashboard and the CLI read.
	rc := newClient(t, rp, nil)
	_, err = rc.Stats(ctx, time.Minute)
	require.NoError(t, err)
	_, err = rc.List(ctx, jobs.ListParams{})
	require.NoError(t, err)
	entries, err := rc.Audit(ctx, 0, 0, 100)
	require.NoError(t, err)
	require.Len(t, entries, 4, "pause, resume, cancel and delete are audited")
	_, err = rc.Workers(ctx)
	require.NoError(t, err)
	_, err = rc.Periodic(ctx)
	require.NoError(t, err)
	_, err = rc.ListQueues(ctx)
	require.NoError(t, err)

	// Let the prune, flow prune and registry run a few more times, then stop (permit release).
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	st := w.Stats()
	t.Logf("claims %d, limited %d, striped %d, permit allocations %d, flow blocks %d, periodic %d, registry writes ok, last error %q",
		st.Claims, st.LimitedClaims, st.StripedClaims, st.PermitAllocations, st.FlowBlocks, st.PeriodicEnqueued, st.LastError)
	require.Zero(t, st.PermissionErrors, "last error %q", st.LastError)
	require.Zero(t, st.ClaimErrors, "last error %q", st.LastError)
	require.Zero(t, st.HeartbeatErrors)
	require.Zero(t, st.ReclaimErrors)
	require.Zero(t, st.PruneErrors, "last error %q", st.LastError)
	require.Zero(t, st.RegistryErrors)
	require.Zero(t, st.PeriodicErrors)
	require.Positive(t, st.PermitAllocations)
	require.Positive(t, st.FlowBlocks, "a RetryAfter paused its key's group")
	var permits, registered int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tenure.flow_permit), (SELECT count(*) FROM tenure.workers)`).Scan(&permits, &registered))
	require.Zero(t, permits, "the stop released the worker's permits")
	require.Zero(t, registered, "the stop deregistered the worker")

	// What each role must not do.
	requireDenied(t, wp, "the worker role",
		`INSERT INTO tenure.audit (actor, action, reason) VALUES ('ops@example', 'cancel', 'forged')`,
		`UPDATE tenure.audit SET reason = 'rewritten'`,
		`DELETE FROM tenure.audit`,
		`UPDATE tenure.queues SET paused = false`,
		`INSERT INTO tenure.schema_migrations (version, name) VALUES (999, 'evil')`,
		`TRUNCATE tenure.jobs`)
	requireDenied(t, ep, "the enqueuer role",
		`INSERT INTO tenure.audit (actor, action, reason) VALUES ('ops@example', 'cancel', 'forged')`,
		`UPDATE tenure.jobs SET state = 'dead', finished_at = now()`,
		`DELETE FROM tenure.jobs`,
		`UPDATE tenure.outbox SET sent_at = now()`,
		`SELECT * FROM tenure.audit`)
	requireDenied(t, op, "the operator role",
		`UPDATE tenure.audit SET reason = 'rewritten'`,
		`DELETE FROM tenure.audit`,
		`INSERT INTO tenure.jobs (kind, payload) VALUES ('noop', '{}')`,
		`DELETE FROM tenure.workers`)
	requireDenied(t, rp, "the reader role",
		`INSERT INTO tenure.audit (actor, action, reason) VALUES ('ops@example', 'cancel', 'forged')`,
		`UPDATE tenure.jobs SET state = 'dead', finished_at = now()`,
		`SELECT tenure.enqueue('noop', '{}')`,
		`DELETE FROM tenure.flow`,
		`SELECT tenure.grant_worker('postgres')`)
	_, err = rc.PauseQueue(ctx, "default", act)
	require.True(t, isDenied(err), "the reader cannot pause a queue: %v", err)
}

// levelRecorder is a slog handler that keeps the level and message of every record.
type levelRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (h *levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelRecorder) WithGroup(string) slog.Handler      { return h }

func (h *levelRecorder) find(prefix, contains string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if strings.HasPrefix(r, prefix) && strings.Contains(r, contains) {
			return true
		}
	}
	return false
}

// TestClaimPermissionErrorIsLoggedAtError: a privilege revoked after Start makes the claims fail
// with insufficient_privilege; each is counted (ClaimErrors and PermissionErrors) and logged at
// ERROR with the function to call, not at WARN like a transient failure.
func TestClaimPermissionErrorIsLoggedAtError(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	role := pgtest.NewRole(t, pool, "SELECT tenure.grant_worker('{role}')")
	rp := pgtest.RolePool(t, pool, role, 4)
	rec := &levelRecorder{}
	cfg := limitedConfig()
	cfg.Logger = slog.New(rec)
	w, err := worker.New(rp, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[limArgs]) error { return nil }, &worker.HandlerOptions{Queue: "lim"})
	startWorker(t, w)
	_, err = pool.Exec(ctx, "REVOKE ALL ON tenure.flow_permit FROM "+role)
	require.NoError(t, err)
	_, err = newClient(t, pool, w).Insert(ctx, limArgs{}, &jobs.InsertOpts{Queue: "lim"})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "a claim refused for a missing privilege", func() bool {
		return w.Stats().ClaimErrors > 0 && w.Stats().PermissionErrors > 0
	})
	waitFor(t, 10*time.Second, "the ERROR line", func() bool { return rec.find("ERROR", "claim failed") })
	require.True(t, rec.find("ERROR", "tenure.grant_worker"))
	require.False(t, rec.find("WARN", "claim failed"), "a permission error is not a WARN")
	require.Contains(t, w.Stats().LastError, "permission denied for table flow_permit")
}
