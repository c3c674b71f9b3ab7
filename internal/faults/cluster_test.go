package faults_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestReadOnlySwitch (scenario 8): on a private cluster, 800 jobs come due over 20 s while a
// worker runs them; 3 s in, the cluster turns read-only (ALTER SYSTEM SET
// default_transaction_read_only = on; pg_reload_conf()) for 15 s, then back. Claims,
// heartbeats and finishes fail meanwhile; in-flight jobs' leases (2 s) expire. Asserted: every
// job ends succeeded, nothing stuck, and handlers start again within 2 s of the switch back.
//
// It runs at two job leases, because the lease decides what a read-only period costs: a
// finish that cannot be written before its job's lease runs out is abandoned, and the sweep
// gives the job to another attempt (at-least-once; never a wrong state). With a 2 s lease the
// finishes in flight at the switch are abandoned within 2 s; with 10 s the same happens to
// those whose lease ends inside the 15 s window. docs/reliability.md row 8 gives both.
func TestReadOnlySwitch(t *testing.T) {
	skipShort(t)
	for _, lease := range []time.Duration{2 * time.Second, 10 * time.Second} {
		t.Run("lease-"+lease.String(), func(t *testing.T) { readOnlySwitch(t, lease) })
	}
}

func readOnlySwitch(t *testing.T, lease time.Duration) {
	ctx := context.Background()
	srv := privateCluster(t)
	url := migratedDB(t, srv, "readonly")
	pool := openPool(t, url, 8, "")
	c := newClient(t, pool)
	const n = 800
	var ids []int64
	for i := 0; i < n; i++ {
		row, err := c.Insert(ctx, faultArgs{N: i}, &jobs.InsertOpts{Lease: lease, Delay: time.Duration(i) * 25 * time.Millisecond})
		require.NoError(t, err)
		ids = append(ids, row.Job.ID)
	}

	var mu sync.Mutex
	var starts []time.Time
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 10}}))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	startWorker(t, w)
	time.Sleep(3 * time.Second) // let the run get going (not an assertion)

	admin, err := pgx.Connect(ctx, srv.URL)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "SET default_transaction_read_only = off") // this session stays writable
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "ALTER SYSTEM SET default_transaction_read_only = on")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "the cluster to be read-only", func() bool {
		_, err := pool.Exec(ctx, "UPDATE tenure.jobs SET priority = priority WHERE false")
		return err != nil
	})
	roAt := time.Now()
	time.Sleep(15 * time.Second) // the read-only window
	_, err = admin.Exec(ctx, "ALTER SYSTEM RESET default_transaction_read_only")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	back := time.Now()
	startsSince := func(at time.Time) (first time.Time, count int) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range starts {
			if s.After(at) {
				count++
				if first.IsZero() || s.Before(first) {
					first = s
				}
			}
		}
		return first, count
	}
	waitFor(t, 20*time.Second, "a handler start after the switch back", func() bool { f, _ := startsSince(back); return !f.IsZero() })
	first, _ := startsSince(back)
	recovery := first.Sub(back)
	_, duringRO := startsSince(roAt.Add(time.Second))
	_, afterBack := startsSince(back)
	waitFor(t, 30*time.Second+2*lease, "every job to succeed", func() bool { return countStates(ctx, pool)["succeeded"] == n })
	tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
	st := w.Stats()
	result(t, "read-only-switch-lease-"+lease.String(), tl, ms(recovery), "read_only=15000ms", "drain_after_back="+ms(time.Since(back)),
		"claim_errors="+strconv.FormatInt(st.ClaimErrors, 10), "finish_abandoned="+strconv.FormatInt(st.FinishAbandoned, 10),
		"reclaimed="+strconv.FormatInt(st.Reclaimed, 10), "starts_during_ro="+strconv.Itoa(duringRO-afterBack))
	require.Less(t, recovery, 2*time.Second, "handlers start within 2 s of the cluster turning writable")
}

// Database roles (scenario 9): the exact statements docs/guide.md ("Database roles") lists.
var (
	roleSetup = []string{
		`CREATE ROLE tenure_owner LOGIN`,
		`CREATE ROLE tenure_app LOGIN`,
		`CREATE ROLE tenure_ops LOGIN`,
	}
	// Run as a superuser (or the database owner) in the application's database.
	dbSetup = []string{
		`REVOKE ALL ON DATABASE appdb FROM PUBLIC`,
		`REVOKE CREATE ON SCHEMA public FROM PUBLIC`,
		`GRANT CONNECT, CREATE ON DATABASE appdb TO tenure_owner`,
		`GRANT CONNECT ON DATABASE appdb TO tenure_app, tenure_ops`,
	}
	// Run as tenure_owner after `tenure migrate up` (migration 0017's functions).
	appGrants = []string{
		`SELECT tenure.grant_worker('tenure_app')`,
		`SELECT tenure.grant_operator('tenure_ops')`,
	}
)

// TestLeastPrivilegeRoles (scenario 9): a migrations role owns schema tenure (it runs the
// migrations) and grants with migration 0017's functions: tenure_app takes grant_worker,
// tenure_ops grant_operator. As tenure_app: enqueue and a worker (claims, heartbeats, effects,
// finishes, reclaim, pruning, a periodic schedule, a limited queue) work; as tenure_ops the
// operator actions (cancel a ready job, cancel a running one, re-inject a dead one, pause and
// resume a queue) work and are audited. The application role cannot create tables in schema
// tenure or public, create schemas, drop or truncate Tenure's tables, read another schema,
// write schema_migrations (it reads it: Start checks the schema version), or write or change
// audit rows.
func TestLeastPrivilegeRoles(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	srv := privateCluster(t)
	admin, err := pgx.Connect(ctx, srv.URL)
	require.NoError(t, err)
	defer admin.Close(ctx)
	for _, s := range append(roleSetup, `CREATE DATABASE appdb`) {
		_, err := admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	dbURL := pgserver.DatabaseURL(srv.URL, "appdb")
	su, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer su.Close(ctx)
	for _, s := range append(dbSetup, `CREATE SCHEMA billing`, `CREATE TABLE billing.secret (x int)`) {
		_, err := su.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	asRole := func(role string) string {
		cfg, err := pgx.ParseConfig(dbURL)
		require.NoError(t, err)
		return "postgres://" + role + "@" + cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/appdb?sslmode=disable"
	}

	owner, err := pgx.Connect(ctx, asRole("tenure_owner"))
	require.NoError(t, err)
	defer owner.Close(ctx)
	_, err = migrations.UpConn(ctx, owner)
	require.NoError(t, err, "migrations as tenure_owner")
	for _, s := range appGrants {
		_, err := owner.Exec(ctx, s)
		require.NoError(t, err, s)
	}

	// Everything below runs as tenure_app.
	appURL := asRole("tenure_app")
	pool := openPool(t, appURL, 6, "")
	c := newClient(t, pool)
	var whoami string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_user").Scan(&whoami))
	require.Equal(t, "tenure_app", whoami)
	// Operator actions (audited) as tenure_ops.
	ops := newClient(t, openPool(t, asRole("tenure_ops"), 2, ""))

	remote := testkit.NewRemote(t)
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4}})
	cfg.PruneEvery = 100 * time.Millisecond
	cfg.FinishedRetention = time.Hour
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	block := make(chan struct{})
	var poisoned atomic.Bool
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error {
		switch job.Args.N {
		case -1: // dies once (permanent), succeeds after re-injection
			if poisoned.CompareAndSwap(false, true) {
				return worker.Permanent(errors.New("poison"))
			}
		case -2: // runs until cancelled
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-block:
			}
		}
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[effArgs]) error {
		_, err := worker.Effect(ctx, job.JobRow, "charge", func(ctx context.Context, call worker.EffectCall) (string, error) {
			return testkit.CallRemote(ctx, remote.URL, call.Key, call.Generation)
		})
		return err
	}, &worker.HandlerOptions{Retry: fastRetry})

	okIDs := insertN(t, c, 50, func(i int) any { return faultArgs{N: i} }, &jobs.InsertOpts{Lease: 2 * time.Second})
	effIDs := insertN(t, c, 50, func(i int) any { return effArgs{N: i} }, &jobs.InsertOpts{Lease: 2 * time.Second})
	later, err := c.Insert(ctx, faultArgs{N: 1000}, &jobs.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	poison, err := c.Insert(ctx, faultArgs{N: -1}, &jobs.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	long, err := c.Insert(ctx, faultArgs{N: -2}, &jobs.InsertOpts{Lease: 2 * time.Second, MaxAttempts: 1})
	require.NoError(t, err)
	act := jobs.Action{Actor: "ops@example", Reason: "least-privilege test"}
	out, err := ops.Cancel(ctx, later.Job.ID, act)
	require.NoError(t, err)
	require.Equal(t, jobs.Cancelled, out)

	startWorker(t, w)
	waitFor(t, 20*time.Second, "the poison job to die", func() bool {
		r, err := c.Get(ctx, poison.Job.ID)
		return err == nil && r.State == generics.JobStateDead
	})
	_, err = ops.Reinject(ctx, poison.Job.ID, act, nil)
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "the long job to run", func() bool {
		r, err := c.Get(ctx, long.Job.ID)
		return err == nil && r.State == generics.JobStateRunning
	})
	out, err = ops.Cancel(ctx, long.Job.ID, act)
	require.NoError(t, err)
	require.Equal(t, jobs.CancelRequested, out)
	all := append(append([]int64{poison.Job.ID}, okIDs...), effIDs...)
	waitFor(t, 30*time.Second, "the jobs to finish", func() bool {
		s := countStates(ctx, pool)
		return s["succeeded"] == len(all) && s["cancelled"] == 2
	})
	tl := audit(t, pool, all, generics.JobStateSucceeded, time.Second)
	cancelled := audit(t, pool, []int64{later.Job.ID, long.Job.ID}, generics.JobStateCancelled, time.Second)
	notOnce, _ := remote.Check(effIDs, "charge")
	entries, err := ops.Audit(ctx, 0, 0, 100)
	require.NoError(t, err)
	st := w.Stats()
	tl.Jobs += cancelled.Jobs
	tl.Lost += cancelled.Lost
	tl.Wrong += cancelled.Wrong
	tl.Stuck += cancelled.Stuck
	result(t, "least-privilege", tl, "n/a", "audit_entries="+strconv.Itoa(len(entries)), "effects_not_once="+strconv.Itoa(notOnce),
		"claim_errors="+strconv.FormatInt(st.ClaimErrors, 10))
	require.Zero(t, notOnce)
	require.GreaterOrEqual(t, len(entries), 3, "cancel, re-inject and cancel request are audited")
	require.Zero(t, st.ClaimErrors)
	require.Zero(t, st.HeartbeatErrors)

	// Periodic schedules and queue pause, as the application role.
	// A concurrency limit: the claims use tenure.flow_permit (permit mode), which the
	// application role of the guide before migration 0017 could not touch (issue 29, item 11).
	pcfg := fastConfig(map[string]worker.QueueConfig{"ticks": {Concurrency: 1,
		Limits: []worker.Limit{{Kind: tickArgs{}.Kind(), MaxRunning: 1}}}})
	pcfg.Periodic = []worker.PeriodicJob{worker.NewPeriodicJob("every-second", worker.Every(time.Second),
		func(_ context.Context, t worker.Tick) (tickArgs, error) { return tickArgs{AtUs: t.At.UnixMicro()}, nil },
		&worker.PeriodicOptions{RunOnStart: true, Insert: &jobs.InsertOpts{Queue: "ticks"}})}
	pw, err := worker.New(pool, pcfg)
	require.NoError(t, err)
	worker.MustRegister(pw, func(context.Context, *generics.Job[tickArgs]) error { return nil }, nil)
	_, err = ops.PauseQueue(ctx, "ticks", act)
	require.NoError(t, err)
	startWorker(t, pw)
	waitFor(t, 10*time.Second, "two periodic jobs", func() bool { return pw.Stats().PeriodicEnqueued >= 2 })
	require.Equal(t, []string{"ticks"}, pw.Stats().PausedQueues)
	_, err = ops.ResumeQueue(ctx, "ticks", act)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "a periodic job to run", func() bool { return pw.Stats().Succeeded >= 1 })
	qs, err := ops.ListQueues(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, qs)
	ps, err := ops.Periodic(ctx)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Zero(t, pw.Stats().PeriodicErrors)
	require.Zero(t, pw.Stats().ClaimErrors)
	require.Zero(t, pw.Stats().PermissionErrors)

	// What the application role must not be able to do.
	for _, s := range []string{
		`CREATE TABLE tenure.evil (x int)`,
		`CREATE TABLE public.evil (x int)`,
		`CREATE TABLE evil (x int)`,
		`CREATE SCHEMA evil`,
		`SELECT * FROM billing.secret`,
		`DROP TABLE tenure.jobs`,
		`TRUNCATE tenure.jobs`,
		`ALTER TABLE tenure.jobs ADD COLUMN evil int`,
		`DELETE FROM tenure.audit`,
		`INSERT INTO tenure.audit (actor, action, reason) VALUES ('ops@example', 'cancel', 'forged')`,
		`UPDATE tenure.audit SET reason = 'rewritten'`,
		`DELETE FROM tenure.schema_migrations`,
		`INSERT INTO tenure.schema_migrations (version, name) VALUES (999, 'evil')`,
		`CREATE TEMP TABLE evil (x int)`,
	} {
		_, err := pool.Exec(ctx, s)
		var pgErr *pgconn.PgError
		require.Error(t, err, "tenure_app must not be able to: %s", s)
		require.True(t, errors.As(err, &pgErr) && pgErr.Code == "42501", "%s: want insufficient_privilege, got %v", s, err)
	}
	var other bool
	require.NoError(t, su.QueryRow(ctx, `SELECT has_database_privilege('tenure_app', 'postgres', 'CONNECT')`).Scan(&other))
	t.Logf("tenure_app may connect to database postgres (PUBLIC default there): %t", other)
}
