// Command workflows (bench/cmd/workflows) measures what workflows and sequences (issue 30,
// docs/guide.md "Workflows" and "Sequences") cost against the same jobs without
// dependencies, in the same run, each phase on a fresh database of the same server:
//
//   - fanout: one workflow of 1 root -> N tasks -> 1 join (-fanout, default 100,000) against
//     N+2 plain jobs;
//   - many: W concurrent workflows of 10 tasks each (root -> 8 -> join; -workflows, default
//     1,000) against W*10 plain jobs;
//   - latency: for -latency-duration, a 2-task workflow (a -> b) and a plain job inserted
//     every 20 ms with the workers idle most of the time: b's release latency (its dependency's
//     finished_at -> its attempted_at) against the plain job's pickup latency (run_at ->
//     attempted_at), database clock, p50/p99;
//   - sequences: -seq-keys keys (default 10,000) of -seq-per-key jobs each against as many
//     unkeyed jobs.
//
// A throughput phase inserts its jobs with the workers stopped, then starts them and measures
// the drain: from the first claim (min attempted_at) to the last finish (max finished_at),
// database clock. Plain runs before the jobs with dependencies in each pair.
//
// Flags: -server own (default: a production-like PostgreSQL started for the run, as
// cmd/compare does) or url (-admin-url); -out writes the JSON (bench/results/). Quick run:
//
//	go run ./cmd/workflows -fanout 10000 -workflows 200 -seq-keys 1000 -latency-duration 5s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

type task struct {
	N int `json:"n"`
}

func (task) Kind() string        { return "wf_task" }
func (task) PayloadVersion() int { return 1 }

type config struct {
	server, adminURL string
	pgSettings       []string
	fanout           int
	fanoutJoin       bool
	preRelease       bool
	analyzeDeps      bool
	workflows        int
	seqKeys          int
	seqPerKey        int
	latencyDur       time.Duration
	concurrency      int
	conns            int
	phases           string
	out              string
	timeout          time.Duration
}

// drain is one throughput measurement.
type drain struct {
	Jobs      int     `json:"jobs"`
	InsertS   float64 `json:"insert_s"`
	DrainS    float64 `json:"drain_s"`
	PerSecond float64 `json:"jobs_per_s"`
	// ReleaseP50Ms/P99Ms: for jobs that waited on others, their last dependency's finish to
	// their claim (database clock); PickupP50Ms/P99Ms: run_at to claim, every job.
	ReleaseP50Ms *float64 `json:"release_p50_ms,omitempty"`
	ReleaseP99Ms *float64 `json:"release_p99_ms,omitempty"`
	PickupP50Ms  float64  `json:"pickup_p50_ms"`
	PickupP99Ms  float64  `json:"pickup_p99_ms"`
	// Fan-out only: the root's finish to the first claim of a task it released (the release of
	// every task, inside the root's finish transaction, plus the first claim), and the span
	// from that first claim to the last middle task's finish.
	RootReleaseS *float64 `json:"root_release_s,omitempty"`
	MiddleSpanS  *float64 `json:"middle_span_s,omitempty"`
	// RootRunS: the root's claim to its finish (its handler does nothing: the rest is the
	// finish, whose transaction releases every middle task); JoinS: the last middle task's
	// finish to the join's finish.
	RootRunS *float64 `json:"root_run_s,omitempty"`
	JoinS    *float64 `json:"join_s,omitempty"`
}

type pair struct {
	Name   string  `json:"name"`
	Shape  string  `json:"shape"`
	Plain  drain   `json:"plain"`
	Flow   drain   `json:"with_dependencies"`
	Ratio  float64 `json:"throughput_ratio"`
	Target float64 `json:"target_ratio"`
	Met    bool    `json:"target_met"`
}

type latency struct {
	DurationS      float64 `json:"duration_s"`
	Released       int     `json:"released"`
	Plain          int     `json:"plain"`
	ReleaseP50Ms   float64 `json:"release_p50_ms"`
	ReleaseP99Ms   float64 `json:"release_p99_ms"`
	PlainPickP50Ms float64 `json:"plain_pickup_p50_ms"`
	PlainPickP99Ms float64 `json:"plain_pickup_p99_ms"`
}

type report struct {
	Date        string            `json:"date"`
	Server      string            `json:"server"`
	Concurrency int               `json:"concurrency"`
	Conns       int               `json:"pool_conns"`
	Load        string            `json:"loadavg_start"`
	Pairs       []pair            `json:"pairs"`
	Latency     *latency          `json:"latency,omitempty"`
	Server2     pgutil.ServerInfo `json:"server_info"`
}

func main() {
	var c config
	flag.StringVar(&c.server, "server", "own", "own: start a production-like PostgreSQL for the run (stock settings, autovacuum on); url: use the server of -admin-url")
	flag.StringVar(&c.adminURL, "admin-url", pgutil.DefaultAdminURL, "with -server url: a database on the server, used to create and drop the per-phase databases")
	flag.IntVar(&c.fanout, "fanout", 100000, "fanout: tasks between the root and the join (0 = skip)")
	flag.BoolVar(&c.analyzeDeps, "analyze-deps", false, "also VACUUM ANALYZE tenure.job_deps before the drain (reproduces the quadratic release plan of a large fan-out + fan-in: see the comment in measure)")
	flag.BoolVar(&c.preRelease, "fanout-prerelease", false, "fanout (diagnosis): finish the root by SQL and VACUUM ANALYZE before the workers start, so the drain excludes the mass release and its dead row versions")
	flag.BoolVar(&c.fanoutJoin, "fanout-join", true, "fanout: end with the join task (false: 1 root -> N only, to separate the fan-in's cost from the fan-out's)")
	flag.IntVar(&c.workflows, "workflows", 1000, "many: concurrent 10-task workflows (0 = skip)")
	flag.IntVar(&c.seqKeys, "seq-keys", 10000, "sequences: keys (0 = skip)")
	flag.IntVar(&c.seqPerKey, "seq-per-key", 3, "sequences: jobs per key")
	flag.DurationVar(&c.latencyDur, "latency-duration", 20*time.Second, "latency: how long a chain and a plain job are inserted every 20 ms (0 = skip)")
	flag.IntVar(&c.concurrency, "concurrency", 32, "worker slots")
	flag.IntVar(&c.conns, "conns", 12, "pool connections of the worker and the client")
	flag.Func("pg-set", "with -server own (diagnosis, repeatable): an extra server setting name=value, e.g. shared_preload_libraries=pg_stat_statements", func(v string) error {
		c.pgSettings = append(c.pgSettings, v)
		return nil
	})
	flag.StringVar(&c.out, "out", "", "write the JSON report to this file (e.g. results/workflows-<date>.json)")
	flag.DurationVar(&c.timeout, "timeout", 15*time.Minute, "give up a drain after this long")
	flag.Parse()
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "workflows:", err)
		os.Exit(1)
	}
}

func logf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }

func run(ctx context.Context, c config) error {
	switch c.server {
	case "own":
		srv, err := pgserver.StartWith(ctx, logf, pgserver.Options{Stock: true, Settings: append([]string{"autovacuum=on"}, c.pgSettings...)})
		if err != nil {
			return fmt.Errorf("start the benchmark's own PostgreSQL (or use -server url): %w", err)
		}
		defer srv.Stop()
		c.adminURL = srv.URL
	case "url":
	default:
		return fmt.Errorf("-server %q: want own or url", c.server)
	}
	info, err := pgutil.ReadServerInfo(ctx, c.adminURL)
	if err != nil {
		return err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	rep := report{Date: time.Now().UTC().Format(time.RFC3339), Server: c.server, Concurrency: c.concurrency,
		Conns: c.conns, Load: string(trimNL(load)), Server2: info}

	if c.fanout > 0 {
		n := c.fanout
		shape, total := fmt.Sprintf("1 root -> %d -> 1 join (one workflow)", n), n+2
		if !c.fanoutJoin {
			shape, total = fmt.Sprintf("1 root -> %d (one workflow, no join)", n), n+1
		}
		p, err := runPair(ctx, c, "fanout", shape, total, 0.85,
			func(ctx context.Context, cl *jobs.Client, pool *pgxpool.Pool) error {
				wf := jobs.NewWorkflow("fanout", nil)
				wf.Add("root", task{}, nil)
				names := make([]string, n)
				for i := range n {
					names[i] = "t" + strconv.Itoa(i)
					wf.Add(names[i], task{N: i}, &jobs.TaskOpts{DependsOn: []string{"root"}})
				}
				if c.fanoutJoin {
					wf.Add("join", task{}, &jobs.TaskOpts{DependsOn: names})
				}
				res, err := cl.InsertWorkflow(ctx, wf)
				if err != nil || !c.preRelease {
					return err
				}
				_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'succeeded', attempts = 1, attempted_at = now(), finished_at = now()
					WHERE id = $1`, res.Tasks["root"].ID)
				return err
			})
		if err != nil {
			return fmt.Errorf("fanout: %w", err)
		}
		rep.Pairs = append(rep.Pairs, p)
	}
	if c.workflows > 0 {
		w := c.workflows
		p, err := runPair(ctx, c, "many", fmt.Sprintf("%d workflows of 10 tasks (root -> 8 -> join)", w), w*10, 0.85,
			func(ctx context.Context, cl *jobs.Client, pool *pgxpool.Pool) error {
				for range w {
					wf := jobs.NewWorkflow("ten", nil)
					wf.Add("root", task{}, nil)
					mid := make([]string, 8)
					for i := range mid {
						mid[i] = "m" + strconv.Itoa(i)
						wf.Add(mid[i], task{N: i}, &jobs.TaskOpts{DependsOn: []string{"root"}})
					}
					wf.Add("join", task{}, &jobs.TaskOpts{DependsOn: mid})
					if _, err := cl.InsertWorkflow(ctx, wf); err != nil {
						return err
					}
				}
				return nil
			})
		if err != nil {
			return fmt.Errorf("many: %w", err)
		}
		rep.Pairs = append(rep.Pairs, p)
	}
	if c.seqKeys > 0 {
		keys, per := c.seqKeys, c.seqPerKey
		p, err := runPair(ctx, c, "sequences", fmt.Sprintf("%d sequence keys x %d jobs", keys, per), keys*per, 0.70,
			func(ctx context.Context, cl *jobs.Client, pool *pgxpool.Pool) error {
				// Inserters own disjoint keys, so each key's jobs are inserted in order.
				const inserters = 6
				var wg sync.WaitGroup
				errs := make([]error, inserters)
				for g := range inserters {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for r := range per {
							for k := g; k < keys; k += inserters {
								if _, err := cl.Insert(ctx, task{N: r}, &jobs.InsertOpts{Sequence: "key-" + strconv.Itoa(k)}); err != nil {
									errs[g] = err
									return
								}
							}
						}
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						return err
					}
				}
				return nil
			})
		if err != nil {
			return fmt.Errorf("sequences: %w", err)
		}
		rep.Pairs = append(rep.Pairs, p)
	}
	if c.latencyDur > 0 {
		l, err := runLatency(ctx, c)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		rep.Latency = &l
	}
	printReport(os.Stdout, rep)
	if c.out != "" {
		raw, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(c.out, append(raw, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fmtOpt(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fs", *f)
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// phaseDB creates a fresh migrated database and returns its pool.
func phaseDB(ctx context.Context, c config, name string) (*pgxpool.Pool, func(), error) {
	name = fmt.Sprintf("tenure_wfbench_%s_%d", name, os.Getpid())
	_ = pgutil.DropDatabase(ctx, c.adminURL, name)
	if err := pgutil.CreateDatabase(ctx, c.adminURL, name); err != nil {
		return nil, nil, err
	}
	url, err := pgutil.WithDatabase(c.adminURL, name)
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgutil.NewPool(ctx, url, int32(c.conns))
	if err != nil {
		_ = pgutil.DropDatabase(ctx, c.adminURL, name)
		return nil, nil, err
	}
	cleanup := func() { pool.Close(); _ = pgutil.DropDatabase(context.Background(), c.adminURL, name) }
	if _, err := migrations.Up(ctx, pool); err != nil {
		cleanup()
		return nil, nil, err
	}
	return pool, cleanup, nil
}

func newWorker(pool *pgxpool.Pool, c config) (*worker.Worker, *jobs.Client, error) {
	w, err := worker.New(pool, &worker.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: c.concurrency}},
	})
	if err != nil {
		return nil, nil, err
	}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[task]) error { return nil }, nil)
	cl, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	if err != nil {
		return nil, nil, err
	}
	return w, cl, nil
}

func runPair(ctx context.Context, c config, name, shape string, n int, target float64,
	insert func(context.Context, *jobs.Client, *pgxpool.Pool) error) (pair, error) {
	p := pair{Name: name, Shape: shape, Target: target}
	var err error
	logf("== %s: plain, %d jobs", name, n)
	p.Plain, err = measure(ctx, c, name+"_plain", n, func(ctx context.Context, cl *jobs.Client, pool *pgxpool.Pool) error {
		const chunk = 5000
		for start := 0; start < n; start += chunk {
			ps := make([]jobs.InsertManyParams, 0, chunk)
			for i := start; i < min(n, start+chunk); i++ {
				ps = append(ps, jobs.InsertManyParams{Args: task{N: i}})
			}
			if _, err := cl.InsertMany(ctx, ps); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return p, err
	}
	logf("   %.0f jobs/s (drain %.2fs)", p.Plain.PerSecond, p.Plain.DrainS)
	logf("== %s: %s", name, shape)
	p.Flow, err = measure(ctx, c, name+"_deps", n, insert)
	if err != nil {
		return p, err
	}
	logf("   %.0f jobs/s (drain %.2fs)", p.Flow.PerSecond, p.Flow.DrainS)
	if p.Flow.RootReleaseS != nil {
		logf("   root claim -> finish %.2fs; root finish -> first released claim %.2fs; middle tasks' span %.2fs; last middle finish -> join finish %s",
			*p.Flow.RootRunS, *p.Flow.RootReleaseS, *p.Flow.MiddleSpanS, fmtOpt(p.Flow.JoinS))
	}
	if p.Plain.PerSecond > 0 {
		p.Ratio = p.Flow.PerSecond / p.Plain.PerSecond
	}
	p.Met = p.Ratio >= target
	return p, nil
}

// measure inserts n jobs with the workers stopped, then drains them and reads the figures
// from the table (database clock).
func measure(ctx context.Context, c config, dbname string, n int, insert func(context.Context, *jobs.Client, *pgxpool.Pool) error) (drain, error) {
	pool, cleanup, err := phaseDB(ctx, c, dbname)
	if err != nil {
		return drain{}, err
	}
	defer cleanup()
	w, cl, err := newWorker(pool, c)
	if err != nil {
		return drain{}, err
	}
	t0 := time.Now()
	if err := insert(ctx, cl, pool); err != nil {
		return drain{}, err
	}
	d := drain{Jobs: n, InsertS: time.Since(t0).Seconds()}
	var total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs`).Scan(&total); err != nil {
		return d, err
	}
	if total != n {
		return d, fmt.Errorf("%d jobs inserted, %d expected", total, n)
	}
	// tenure.jobs only by default, as in runs 1 and 2 (docs/benchmarks.md): tenure.job_deps
	// keeps whatever statistics autovacuum gave it. With -analyze-deps (statistics on a fresh
	// 1 -> N -> 1 graph) the release's generic plan joins the released rows to the per-job
	// counts by a nested loop: quadratic, a finish releasing 20,000 dependents ran past the
	// engine's 10 s finish timeout at every attempt (the root went from lease expiry to lease
	// expiry). Reported for the engine; this flag reproduces it.
	_, _ = pool.Exec(ctx, `VACUUM ANALYZE tenure.jobs`)
	if c.analyzeDeps {
		_, _ = pool.Exec(ctx, `VACUUM ANALYZE tenure.job_deps`)
	}
	if err := w.Start(ctx); err != nil {
		return d, err
	}
	deadline := time.Now().Add(c.timeout)
	for {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state <> 'succeeded'`).Scan(&left); err != nil {
			return d, err
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return d, fmt.Errorf("%d of %d jobs not succeeded after %v", left, n, c.timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		return d, err
	}
	if err := pool.QueryRow(ctx, `
		SELECT extract(epoch FROM max(finished_at) - min(attempted_at))::float8,
		       1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)),
		       1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at))
		FROM tenure.jobs`).Scan(&d.DrainS, &d.PickupP50Ms, &d.PickupP99Ms); err != nil {
		return d, err
	}
	d.PerSecond = float64(n) / d.DrainS
	var p50, p99 *float64
	if err := pool.QueryRow(ctx, releaseQuery).Scan(&p50, &p99); err != nil {
		return d, err
	}
	d.ReleaseP50Ms, d.ReleaseP99Ms = p50, p99
	if err := pool.QueryRow(ctx, `
		SELECT extract(epoch FROM min(m.attempted_at) - (SELECT finished_at FROM tenure.jobs WHERE task_name = 'root' LIMIT 1))::float8,
		       extract(epoch FROM max(m.finished_at) - min(m.attempted_at))::float8
		FROM tenure.jobs m WHERE m.task_name LIKE 't%' AND m.workflow_id IS NOT NULL`).Scan(&d.RootReleaseS, &d.MiddleSpanS); err != nil {
		return d, err
	}
	var rootInfo string
	_ = pool.QueryRow(ctx, `SELECT format('attempts %s generation %s errors %s created %s attempted %s finished %s', attempts, generation, errors, created_at, attempted_at, finished_at) FROM tenure.jobs WHERE task_name = 'root'`).Scan(&rootInfo)
	logf("   root: %s", rootInfo)
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT extract(epoch FROM finished_at - attempted_at)::float8 FROM tenure.jobs WHERE task_name = 'root' LIMIT 1),
		       (SELECT extract(epoch FROM j.finished_at - (SELECT max(finished_at) FROM tenure.jobs WHERE task_name LIKE 't%'))::float8
		        FROM tenure.jobs j WHERE j.task_name = 'join' LIMIT 1)`).Scan(&d.RootRunS, &d.JoinS); err != nil {
		return d, err
	}
	return d, nil
}

// releaseQuery: for each job that waited on others, its claim minus its last dependency's
// finish, p50 and p99 in milliseconds (NULL when no job waited).
const releaseQuery = `
	SELECT 1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY r.s), 1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY r.s)
	FROM (SELECT extract(epoch FROM j.attempted_at - max(d.finished_at)) AS s
	      FROM tenure.job_deps e
	      JOIN tenure.jobs j ON j.id = e.job_id
	      JOIN tenure.jobs d ON d.id = e.dep_id
	      GROUP BY j.id, j.attempted_at) r`

// runLatency inserts a 2-task chain (a -> b) and a plain job every 20 ms for c.latencyDur
// with the workers running, then compares b's release latency with the plain job's pickup.
func runLatency(ctx context.Context, c config) (latency, error) {
	logf("== latency: a chain a -> b and a plain job every 20 ms for %v", c.latencyDur)
	pool, cleanup, err := phaseDB(ctx, c, "latency")
	if err != nil {
		return latency{}, err
	}
	defer cleanup()
	w, cl, err := newWorker(pool, c)
	if err != nil {
		return latency{}, err
	}
	if err := w.Start(ctx); err != nil {
		return latency{}, err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	end := time.Now().Add(c.latencyDur)
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		wf := jobs.NewWorkflow("chain", nil)
		wf.Add("a", task{N: i}, nil)
		wf.Add("b", task{N: i}, &jobs.TaskOpts{DependsOn: []string{"a"}})
		if _, err := cl.InsertWorkflow(ctx, wf); err != nil {
			return latency{}, err
		}
		if _, err := cl.Insert(ctx, task{N: i}, nil); err != nil {
			return latency{}, err
		}
	}
	tick.Stop()
	for {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state <> 'succeeded'`).Scan(&left); err != nil {
			return latency{}, err
		}
		if left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		return latency{}, err
	}
	l := latency{DurationS: c.latencyDur.Seconds()}
	var p50, p99 *float64
	if err := pool.QueryRow(ctx, releaseQuery).Scan(&p50, &p99); err != nil || p50 == nil {
		return l, fmt.Errorf("release latency: %v", err)
	}
	l.ReleaseP50Ms, l.ReleaseP99Ms = *p50, *p99
	if err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE task_name = 'b'), count(*) FILTER (WHERE workflow_id IS NULL),
		       1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)) FILTER (WHERE workflow_id IS NULL),
		       1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)) FILTER (WHERE workflow_id IS NULL)
		FROM tenure.jobs`).Scan(&l.Released, &l.Plain, &l.PlainPickP50Ms, &l.PlainPickP99Ms); err != nil {
		return l, err
	}
	return l, nil
}

func printReport(out io.Writer, r report) {
	fmt.Fprintf(out, "Workflows and sequences vs plain jobs (%s, server %s, %d slots, %d conns, load %s)\n\n",
		r.Date, r.Server, r.Concurrency, r.Conns, r.Load)
	fmt.Fprintln(out, "| phase | shape | plain jobs/s | with dependencies jobs/s | ratio | target | insert s (plain / deps) | release p50 / p99 ms | plain pickup p50 / p99 ms |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range r.Pairs {
		rel := "-"
		if p.Flow.ReleaseP50Ms != nil {
			rel = fmt.Sprintf("%.1f / %.1f", *p.Flow.ReleaseP50Ms, *p.Flow.ReleaseP99Ms)
		}
		met := "met"
		if !p.Met {
			met = "MISSED"
		}
		fmt.Fprintf(out, "| %s | %s | %.0f | %.0f | %.2f | ≥ %.2f %s | %.2f / %.2f | %s | %.1f / %.1f |\n",
			p.Name, p.Shape, p.Plain.PerSecond, p.Flow.PerSecond, p.Ratio, p.Target, met,
			p.Plain.InsertS, p.Flow.InsertS, rel, p.Plain.PickupP50Ms, p.Plain.PickupP99Ms)
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(out, "\nRelease latency (%.0f s, a -> b chain and a plain job every 20 ms): release p50 %.1f ms p99 %.1f ms (%d released) vs plain pickup p50 %.1f ms p99 %.1f ms (%d plain)\n",
			l.DurationS, l.ReleaseP50Ms, l.ReleaseP99Ms, l.Released, l.PlainPickP50Ms, l.PlainPickP99Ms, l.Plain)
	}
}
