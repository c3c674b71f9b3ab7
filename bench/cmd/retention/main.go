// Command retention measures delete on success (worker.HandlerOptions.DeleteOnSuccess,
// docs/guide.md §28) against the default retention (a succeeded row kept, then pruned), in the
// same run, on fresh databases of one throwaway PostgreSQL cluster with stock settings (fsync,
// synchronous_commit, full_page_writes on) and autovacuum off (so that no vacuum writes WAL
// inside a measured window; the dead row versions left are reported instead).
//
// Per repetition and mode (keep, delete, alternating): N jobs are inserted in one statement,
// then a worker with default settings (one queue, Concurrency 100, handlers that return at
// once) burns them down; in keep mode the succeeded rows are then pruned (jobs.Client
// PruneExpired), as the worker's pruner would after the retention period. Measured per phase:
// WAL bytes (pg_current_wal_insert_lsn delta; the cluster has no other client), WAL records
// and full-page images (pg_stat_wal), tenure.jobs row versions written (pg_stat_user_tables
// n_tup_ins / n_tup_upd / n_tup_del, read after the worker's connections closed, so every
// backend flushed its counts), dead row versions left (n_dead_tup), and the burn-down's
// throughput (jobs / time from Start until the last success was counted).
//
//	go run ./cmd/retention                       # 20,000 jobs, 3 repetitions
//	go run ./cmd/retention -jobs 5000 -reps 1    # quick
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

type retArgs struct {
	N int `json:"n"`
}

func (retArgs) Kind() string        { return "ret" }
func (retArgs) PayloadVersion() int { return 1 }

type tableStats struct{ ins, upd, hot, del, dead int64 }

func (t tableStats) sub(b tableStats) tableStats {
	return tableStats{t.ins - b.ins, t.upd - b.upd, t.hot - b.hot, t.del - b.del, t.dead}
}

type phase struct {
	wal   pgutil.WAL
	rows  tableStats
	dur   time.Duration
	valid bool
}

type result struct {
	mode                  string
	rep                   int
	insert, burn, prune   phase
	jobsPerSec            float64
	rowsLeft, succeededOK int64
}

func logf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }

func main() {
	n := flag.Int("jobs", 20000, "jobs per run")
	reps := flag.Int("reps", 3, "repetitions (each runs keep and delete)")
	conc := flag.Int("concurrency", 100, "worker queue concurrency")
	md := flag.String("md", "", "also write the report (markdown) to this file")
	flag.Parse()
	ctx := context.Background()
	srv, err := pgserver.StartWith(ctx, logf, pgserver.Options{Stock: true, Settings: []string{"autovacuum=off"}})
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}
	defer srv.Stop()
	info, err := pgutil.ReadServerInfo(ctx, srv.URL)
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}
	var results []result
	for rep := 1; rep <= *reps; rep++ {
		modes := []string{"keep", "delete"}
		if rep%2 == 0 {
			slices.Reverse(modes)
		}
		for _, m := range modes {
			r, err := runOne(ctx, srv.URL, m, rep, *n, *conc)
			if err != nil {
				logf("%s rep %d: %v", m, rep, err)
				os.Exit(1)
			}
			logf("%s rep %d: burn-down %.0f jobs/s, WAL %d B (+ prune %d B), rows left %d", m, rep, r.jobsPerSec,
				r.burn.wal.Bytes, r.prune.wal.Bytes, r.rowsLeft)
			results = append(results, r)
		}
	}
	var out io.Writer = os.Stdout
	if *md != "" {
		f, err := os.Create(*md)
		if err != nil {
			logf("%v", err)
			os.Exit(1)
		}
		defer f.Close()
		out = io.MultiWriter(os.Stdout, f)
	}
	report(out, info, *n, *reps, *conc, results)
}

func runOne(ctx context.Context, adminURL, mode string, rep, n, conc int) (res result, err error) {
	res = result{mode: mode, rep: rep}
	name := fmt.Sprintf("ret_%s_%d_%d", mode, rep, time.Now().UnixNano()%1e6)
	if err := pgutil.CreateDatabase(ctx, adminURL, name); err != nil {
		return res, err
	}
	defer func() { _ = pgutil.DropDatabase(context.Background(), adminURL, name) }()
	dbURL, err := pgutil.WithDatabase(adminURL, name)
	if err != nil {
		return res, err
	}
	meter, err := pgutil.ConnectMeter(ctx, dbURL)
	if err != nil {
		return res, err
	}
	defer meter.Close(ctx)
	if _, err := migrations.UpConn(ctx, meter); err != nil {
		return res, err
	}
	if _, err := meter.Exec(ctx, "CHECKPOINT"); err != nil { // every run starts after a checkpoint: same full-page-image exposure
		return res, err
	}
	measure := func(f func() error) (phase, error) {
		w0, err := pgutil.ReadWAL(ctx, meter)
		if err != nil {
			return phase{}, err
		}
		t0, err := readStats(ctx, meter)
		if err != nil {
			return phase{}, err
		}
		start := time.Now()
		if err := f(); err != nil {
			return phase{}, err
		}
		d := time.Since(start)
		time.Sleep(1200 * time.Millisecond) // pg_stat_wal: backends flush at most once a second
		w1, err := pgutil.ReadWAL(ctx, meter)
		if err != nil {
			return phase{}, err
		}
		t1, err := readStats(ctx, meter)
		if err != nil {
			return phase{}, err
		}
		return phase{wal: w1.Sub(w0), rows: t1.sub(t0), dur: d, valid: true}, nil
	}
	res.insert, err = measure(func() error {
		_, err := meter.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload)
			SELECT 'default', 'ret', jsonb_build_object('n', g) FROM generate_series(1, $1) g`, n)
		return err
	})
	if err != nil {
		return res, err
	}
	pool, err := pgutil.NewPool(ctx, dbURL, 40)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	var burnDur time.Duration
	res.burn, err = measure(func() error {
		w, err := worker.New(pool, &worker.Config{
			Queues: map[string]worker.QueueConfig{"default": {Concurrency: conc}},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			// No pruning inside the window: the prune phase measures it.
			FinishedRetention: -1, DeadRetention: -1,
		})
		if err != nil {
			return err
		}
		worker.MustRegister(w, func(ctx context.Context, job *generics.Job[retArgs]) error { return nil },
			&worker.HandlerOptions{DeleteOnSuccess: mode == "delete"})
		start := time.Now()
		if err := w.Start(ctx); err != nil {
			return err
		}
		for w.Stats().Succeeded < int64(n) {
			time.Sleep(2 * time.Millisecond)
		}
		burnDur = time.Since(start)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res.succeededOK = w.Stats().Succeeded
		if err := w.Stop(sctx); err != nil {
			return err
		}
		pool.Reset() // close the worker's connections: their backends flush their table counts
		return nil
	})
	if err != nil {
		return res, err
	}
	res.jobsPerSec = float64(n) / burnDur.Seconds()
	if mode == "keep" {
		c, err := jobs.NewClient(pool, nil)
		if err != nil {
			return res, err
		}
		res.prune, err = measure(func() error {
			_, err := c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now().Add(time.Hour), BatchSize: 5000, Budget: time.Minute})
			pool.Reset()
			return err
		})
		if err != nil {
			return res, err
		}
	}
	if err := meter.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&res.rowsLeft); err != nil {
		return res, err
	}
	return res, nil
}

func readStats(ctx context.Context, conn *pgx.Conn) (tableStats, error) {
	var t tableStats
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return t, err
	}
	err := conn.QueryRow(ctx, `SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup
		FROM pg_stat_user_tables WHERE schemaname = 'tenure' AND relname = 'jobs'`).Scan(&t.ins, &t.upd, &t.hot, &t.del, &t.dead)
	return t, err
}

func report(out io.Writer, info pgutil.ServerInfo, n, reps, conc int, rs []result) {
	fmt.Fprintf(out, "# Delete on success vs keep-then-prune\n\n")
	fmt.Fprintf(out, "%d jobs per run, %d repetitions, worker Concurrency %d, handlers return at once; server: %s\n\n", n, reps, conc, info.Version)
	fmt.Fprintf(out, "Per 1,000 jobs (burn-down = claim + finish; prune = keep mode's later PruneExpired):\n\n")
	tw := tabwriter.NewWriter(out, 2, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| mode | rep | burn-down jobs/s | burn WAL KiB | burn WAL records | burn FPI | prune WAL KiB | total WAL KiB (burn+prune) | row versions ins/upd(hot)/del | dead tuples left | rows left |")
	fmt.Fprintln(tw, "|---|---|---|---|---|---|---|---|---|---|---|")
	per := func(v int64) float64 { return float64(v) * 1000 / float64(n) }
	for _, r := range rs {
		rows := r.burn.rows
		pr := r.prune.rows
		dead := rows.dead
		if r.prune.valid {
			dead = pr.dead
		}
		fmt.Fprintf(tw, "| %s | %d | %.0f | %.1f | %.0f | %.0f | %.1f | %.1f | %.0f/%.0f(%.0f)/%.0f | %.0f | %d |\n",
			r.mode, r.rep, r.jobsPerSec, per(r.burn.wal.Bytes)/1024, per(r.burn.wal.Records), per(r.burn.wal.FPI),
			per(r.prune.wal.Bytes)/1024, per(r.burn.wal.Bytes+r.prune.wal.Bytes)/1024,
			per(r.insert.rows.ins+rows.ins+pr.ins), per(rows.upd+pr.upd), per(rows.hot+pr.hot), per(rows.del+pr.del), per(dead), r.rowsLeft)
	}
	tw.Flush()
	// Medians.
	fmt.Fprintf(out, "\nMedians over the repetitions:\n\n")
	fmt.Fprintln(out, "| mode | burn-down jobs/s | burn WAL KiB / 1k | burn+prune WAL KiB / 1k | row versions written / 1k (upd+del, burn+prune) |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, m := range []string{"keep", "delete"} {
		var tp, wb, wt, rv []float64
		for _, r := range rs {
			if r.mode != m {
				continue
			}
			tp = append(tp, r.jobsPerSec)
			wb = append(wb, per(r.burn.wal.Bytes)/1024)
			wt = append(wt, per(r.burn.wal.Bytes+r.prune.wal.Bytes)/1024)
			rv = append(rv, per(r.burn.rows.upd+r.burn.rows.del+r.prune.rows.upd+r.prune.rows.del))
		}
		fmt.Fprintf(out, "| %s | %.0f | %.1f | %.1f | %.0f |\n", m, median(tp), median(wb), median(wt), median(rv))
	}
	fmt.Fprintf(out, "\nCommand: `cd bench && go run ./cmd/retention %s`\n", strings.Join(os.Args[1:], " "))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
