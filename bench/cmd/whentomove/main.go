// Command whentomove measures what Tenure's queue costs the database next to a typical business
// write, and what moving the jobs to NATS JetStream (package tenurenats) takes off it.
//
// Every job accompanies a business transaction that INSERTs an order row (~300 bytes, a primary
// key and one secondary index); the job's handler UPDATEs that row. Four variants run the same
// orders at the same offered rates, each on a fresh database of one throwaway PostgreSQL
// cluster started with stock settings (fsync, synchronous_commit, full_page_writes on) and
// pg_stat_statements:
//
//   - business: no queue. The order is inserted, and an in-process channel hands its id to the
//     goroutine that updates it. This is the database's cost of the business writes alone.
//   - tenure: the job is enqueued in the order's transaction (jobs.Client.InsertTx); a
//     worker.Worker with default settings runs it.
//   - js-outbox: the job is written to the transactional outbox in the order's transaction
//     (tenurenats.InsertTx); a tenurenats.Relay publishes it to JetStream; a
//     tenurenats.Worker runs it.
//   - js-direct: the order commits, then the job is published to JetStream directly
//     (tenurenats.Insert: not transactional, a dual write); a tenurenats.Worker runs it.
//
// A run offers orders at the rate for the duration (open loop, one transaction per order),
// waits until every order is confirmed and the queue is settled (jobs succeeded, outbox rows
// marked sent), then prunes what the queue leaves behind (succeeded jobs, sent outbox rows) and
// VACUUMs the tables the variant wrote, all inside the measured window. Measured: WAL bytes
// (pg_current_wal_lsn delta; the cluster has no other clients), server CPU (the postmaster,
// the shared auxiliary processes and every backend of the run's database, from /proc), and
// pg_stat_statements per statement, split into business statements (the order INSERT and
// UPDATE and VACUUM of the orders table), transaction control (BEGIN/COMMIT) and queue
// statements (everything else the run's clients sent). The queue's share of WAL and CPU is
// (variant − business) / variant at the same rate.
//
//	go run ./cmd/whentomove                          # rates 100,300,1000 jobs/s, 8 s each
//	go run ./cmd/whentomove -rates 200 -duration 5s -variants business,tenure
package main

import (
	"context"

	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenurenats"
	"github.com/tenureq/tenure/worker"
)

// confirmOrder is the job: confirm the order row the business transaction inserted.
type confirmOrder struct {
	OrderID int64 `json:"order_id"`
}

func (confirmOrder) Kind() string        { return "confirm_order" }
func (confirmOrder) PayloadVersion() int { return 1 }

const ordersDDL = `
CREATE SCHEMA shop;
CREATE TABLE shop.orders (
	id               bigserial PRIMARY KEY,
	customer_id      bigint NOT NULL,
	sku              text NOT NULL,
	quantity         int NOT NULL,
	amount_cents     bigint NOT NULL,
	currency         text NOT NULL,
	status           text NOT NULL,
	shipping_address text NOT NULL,
	note             text NOT NULL,
	created_at       timestamptz NOT NULL DEFAULT now(),
	updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX orders_customer_idx ON shop.orders (customer_id, created_at);`

// The business statements carry a sqlc-style name so that pg_stat_statements tells them apart.
const (
	insertOrder = `-- name: shop_insert_order
INSERT INTO shop.orders (customer_id, sku, quantity, amount_cents, currency, status, shipping_address, note)
VALUES ($1, $2, $3, $4, 'EUR', 'placed', $5, $6) RETURNING id`
	confirmOrderSQL = `-- name: shop_confirm_order
UPDATE shop.orders SET status = 'confirmed', updated_at = now() WHERE id = $1`
	pollConfirmed = `-- name: bench_poll
SELECT count(*) FROM shop.orders WHERE status = 'confirmed'`
)

var letters = []byte("abcdefghijklmnopqrstuvwxyz ")

func text(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return string(b)
}

type config struct {
	rates    []int
	duration time.Duration
	variants []string
	natsURL  string
	mdOut    string
}

func main() {
	var rates, variants string
	var c config
	flag.StringVar(&rates, "rates", "100,300,1000", "offered rates, jobs (orders) per second")
	flag.DurationVar(&c.duration, "duration", 8*time.Second, "how long each run offers orders")
	flag.StringVar(&variants, "variants", "business,tenure,js-outbox,js-direct", "variants to run")
	flag.StringVar(&c.natsURL, "nats", envOr("TENURE_NATS_URL", nats.DefaultURL), "NATS server with JetStream")
	flag.StringVar(&c.mdOut, "out", "", "also write the table (markdown) to this file")
	flag.Parse()
	for _, r := range strings.Split(rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			fatal(fmt.Errorf("bad rate %q", r))
		}
		c.rates = append(c.rates, n)
	}
	c.variants = strings.Split(variants, ",")
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, c); err != nil {
		fatal(err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "whentomove:", err)
	os.Exit(1)
}

func logf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }

type result struct {
	variant         string
	offered, jobs   int
	achieved        float64 // orders committed per second while producing
	drain           time.Duration
	walBytes        int64
	cpu             time.Duration
	stmtWAL, stmtMs map[string]float64 // by class: business, txn, queue
	topQueue        []pgutil.Statement
	producerErrs    int64
	notes           []string
}

func run(ctx context.Context, c config) error {
	srv, err := pgserver.StartWith(ctx, logf, pgserver.Options{Stock: true,
		Settings: []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.max=5000"}})
	if err != nil {
		return err
	}
	defer srv.Stop()
	if err := pgutil.EnableStatements(ctx, srv.URL); err != nil {
		return err
	}
	info, err := pgutil.ReadServerInfo(ctx, srv.URL)
	if err != nil {
		return err
	}
	var js jetstream.JetStream
	needJS := slices.ContainsFunc(c.variants, func(v string) bool { return strings.HasPrefix(v, "js-") })
	if needJS {
		nc, err := nats.Connect(c.natsURL, nats.Timeout(2*time.Second))
		if err != nil {
			return fmt.Errorf("NATS at %s: %w (the js-* variants need a NATS server with JetStream; -variants business,tenure skips them)", c.natsURL, err)
		}
		defer nc.Close()
		if js, err = jetstream.New(nc); err != nil {
			return err
		}
		if _, err := js.AccountInfo(ctx); err != nil {
			return fmt.Errorf("NATS at %s has no JetStream: %w", c.natsURL, err)
		}
	}

	var results []result
	for _, rate := range c.rates {
		for _, v := range c.variants {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logf("run %s at %d jobs/s for %v", v, rate, c.duration)
			r, err := runOne(ctx, srv.URL, js, v, rate, c.duration)
			if err != nil {
				return fmt.Errorf("%s at %d/s: %w", v, rate, err)
			}
			results = append(results, r)
			logf("  achieved %.0f/s, drain %v, WAL %d B, CPU %v", r.achieved, r.drain.Round(time.Millisecond), r.walBytes, r.cpu.Round(time.Millisecond))
		}
	}
	report(os.Stdout, c, info, results)
	if c.mdOut != "" {
		f, err := os.Create(c.mdOut)
		if err != nil {
			return err
		}
		defer f.Close()
		report(f, c, info, results)
	}
	return nil
}

// runOne runs one variant at one rate on a fresh database.
func runOne(ctx context.Context, adminURL string, js jetstream.JetStream, variant string, rate int, dur time.Duration) (res result, err error) {
	res = result{variant: variant, offered: rate}
	dbName := fmt.Sprintf("wtm_%s_%d_%d", strings.ReplaceAll(variant, "-", "_"), rate, time.Now().UnixNano()%1e6)
	if err := pgutil.CreateDatabase(ctx, adminURL, dbName); err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = pgutil.DropDatabase(dctx, adminURL, dbName)
	}()
	dbURL, err := pgutil.WithDatabase(adminURL, dbName)
	if err != nil {
		return res, err
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return res, err
	}
	if _, err := migrations.UpConn(ctx, conn); err != nil {
		conn.Close(ctx)
		return res, err
	}
	if _, err := conn.Exec(ctx, ordersDDL); err != nil {
		conn.Close(ctx)
		return res, err
	}
	conn.Close(ctx)

	pool, err := pgutil.NewPool(ctx, dbURL, 24)
	if err != nil {
		return res, err
	}
	// The pools close after the CPU snapshot (backends must be alive to be attributed).
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		pool.Close()
	}()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	confirm := func(ctx context.Context, id int64) error {
		_, err := pool.Exec(ctx, confirmOrderSQL, id)
		return err
	}

	// enqueue is the queue's part of one order's transaction (nil: none); after runs after
	// the commit (js-direct's publish).
	var (
		enqueue     func(ctx context.Context, tx pgx.Tx, id int64) error
		after       func(ctx context.Context, id int64) error
		settled     func(ctx context.Context) (bool, error)
		cleanup     func(ctx context.Context) error
		vacuumQueue []string
	)
	runCtx, stopConsumers := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	closers = append(closers, func() { stopConsumers(); consumers.Wait() })

	switch variant {
	case "business":
		ch := make(chan int64, 1<<16)
		for range 16 {
			consumers.Add(1)
			go func() {
				defer consumers.Done()
				for {
					select {
					case id := <-ch:
						for confirm(runCtx, id) != nil && runCtx.Err() == nil {
							time.Sleep(10 * time.Millisecond)
						}
					case <-runCtx.Done():
						return
					}
				}
			}()
		}
		after = func(ctx context.Context, id int64) error { ch <- id; return nil }
	case "tenure":
		client, err := jobs.NewClient(pool, &jobs.Config{})
		if err != nil {
			return res, err
		}
		w, err := worker.New(pool, &worker.Config{Queues: map[string]worker.QueueConfig{"default": {Concurrency: 16}}, Logger: quiet})
		if err != nil {
			return res, err
		}
		worker.MustRegister(w, func(ctx context.Context, job *generics.Job[confirmOrder]) error {
			return confirm(ctx, job.Args.OrderID)
		}, nil)
		if err := w.Start(runCtx); err != nil {
			return res, err
		}
		closers = append(closers, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Stop(sctx)
		})
		enqueue = func(ctx context.Context, tx pgx.Tx, id int64) error {
			_, err := client.InsertTx(ctx, tx, confirmOrder{OrderID: id}, nil)
			return err
		}
		settled = func(ctx context.Context) (bool, error) {
			var n int
			err := pool.QueryRow(ctx, "-- name: bench_poll_jobs\nSELECT count(*) FROM tenure.jobs WHERE state <> 'succeeded'").Scan(&n)
			return n == 0, err
		}
		cleanup = func(ctx context.Context) error {
			_, err := client.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now().Add(time.Hour)})
			return err
		}
		vacuumQueue = []string{"tenure.jobs"}
	case "js-outbox", "js-direct":
		id := fmt.Sprintf("%s%d%d", strings.ReplaceAll(variant, "-", ""), rate, time.Now().UnixNano()%1e6)
		stream, prefix := "WTM_"+strings.ToUpper(id), "wtm"+id
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"},
			Duplicates: 2 * time.Minute, Storage: jetstream.FileStorage, MaxAge: time.Hour}); err != nil {
			return res, err
		}
		closers = append(closers, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = js.DeleteStream(dctx, stream)
		})
		subjects := prefix + ".jobs"
		w, err := tenurenats.NewWorker(js, &tenurenats.Config{Stream: stream, SubjectPrefix: subjects,
			Durable: "wtm", Concurrency: 16, FetchWait: 200 * time.Millisecond, Pool: pool, Logger: quiet})
		if err != nil {
			return res, err
		}
		if err := tenurenats.Register(w, func(ctx context.Context, job *generics.Job[confirmOrder]) error {
			return confirm(ctx, job.Args.OrderID)
		}, nil); err != nil {
			return res, err
		}
		consumers.Add(1)
		go func() { defer consumers.Done(); _ = w.Run(runCtx) }()
		client, err := tenurenats.NewClient(js, &tenurenats.ClientConfig{SubjectPrefix: subjects, Stream: stream, Registry: w.Registry()})
		if err != nil {
			return res, err
		}
		if variant == "js-outbox" {
			relay, err := tenurenats.NewRelay(pool, js, &tenurenats.RelayConfig{Stream: stream, Logger: quiet})
			if err != nil {
				return res, err
			}
			consumers.Add(1)
			go func() { defer consumers.Done(); _ = relay.Run(runCtx) }()
			enqueue = func(ctx context.Context, tx pgx.Tx, id int64) error {
				_, err := tenurenats.InsertTx(ctx, tx, client, confirmOrder{OrderID: id}, nil)
				return err
			}
			settled = func(ctx context.Context) (bool, error) {
				n, _, err := tenurenats.Pending(ctx, pool)
				return n == 0, err
			}
			cleanup = func(ctx context.Context) error {
				_, err := tenurenats.PruneSent(ctx, pool, 0)
				return err
			}
			vacuumQueue = []string{"tenure.outbox"}
		} else {
			after = func(ctx context.Context, id int64) error {
				_, err := tenurenats.Insert(ctx, client, confirmOrder{OrderID: id}, nil)
				return err
			}
		}
	default:
		return res, fmt.Errorf("unknown variant %q", variant)
	}

	// Let the consumers settle (LISTEN, consumers created) before measuring.
	time.Sleep(time.Second)
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return res, err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return res, err
	}
	cpu, err := pgutil.StartServerCPU(ctx, dbURL)
	if err != nil {
		return res, err
	}
	defer cpu.Close(context.Background())
	stmtsBefore := pgutil.Statements(ctx, dbURL, 5000)
	var lsn0 string
	if err := admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn0); err != nil {
		return res, err
	}
	cpu.Reset()

	// Produce: open loop, one transaction per order, 16 producers.
	total := rate * int(dur/time.Second)
	work := make(chan struct{}, total)
	var produced, prodErrs atomic.Int64
	var producers sync.WaitGroup
	start := time.Now()
	for range 16 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for range work {
				if err := produceOne(ctx, pool, enqueue, after); err != nil {
					prodErrs.Add(1)
					continue
				}
				produced.Add(1)
			}
		}()
	}
	interval := 10 * time.Millisecond
	for i := 0; i < total; {
		due := int(float64(time.Since(start)) / float64(time.Second) * float64(rate))
		for ; i < min(due, total); i++ {
			work <- struct{}{}
		}
		time.Sleep(interval)
	}
	close(work)
	producers.Wait()
	prodDur := time.Since(start)
	res.jobs = int(produced.Load())
	res.producerErrs = prodErrs.Load()
	res.achieved = float64(res.jobs) / prodDur.Seconds()

	// Drain: every order confirmed and the queue settled.
	drainStart := time.Now()
	deadline := drainStart.Add(3 * time.Minute)
	for {
		var n int
		if err := pool.QueryRow(ctx, pollConfirmed).Scan(&n); err != nil {
			return res, err
		}
		ok := n >= res.jobs
		if ok && settled != nil {
			if ok, err = settled(ctx); err != nil {
				return res, err
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			res.notes = append(res.notes, fmt.Sprintf("not drained after 3 min (%d of %d confirmed)", n, res.jobs))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.drain = time.Since(drainStart)
	if cleanup != nil {
		if err := cleanup(ctx); err != nil {
			return res, fmt.Errorf("cleanup: %w", err)
		}
	}
	for _, t := range append([]string{"shop.orders"}, vacuumQueue...) {
		if _, err := pool.Exec(ctx, "VACUUM "+t); err != nil {
			return res, err
		}
	}

	var walDelta int64
	if err := admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", lsn0).Scan(&walDelta); err != nil {
		return res, err
	}
	attributed, _, err := cpu.Stop(ctx)
	if err != nil {
		return res, err
	}
	res.walBytes, res.cpu = walDelta, attributed
	if !cpu.OK() {
		res.notes = append(res.notes, "server CPU not readable from /proc")
	}
	stmts := pgutil.StatementsSince(stmtsBefore, pgutil.Statements(ctx, dbURL, 5000), 5000)
	res.stmtWAL, res.stmtMs = map[string]float64{}, map[string]float64{}
	for _, s := range stmts {
		cl := classify(s.Query)
		if cl == "" {
			continue
		}
		res.stmtWAL[cl] += float64(s.WALBytes)
		res.stmtMs[cl] += s.TotalMs
		if cl == "queue" {
			res.topQueue = append(res.topQueue, s)
		}
	}
	slices.SortFunc(res.topQueue, func(a, b pgutil.Statement) int { return int(b.WALBytes - a.WALBytes) })
	return res, nil
}

// classify puts a pg_stat_statements entry in "business", "txn", "queue", or "" (the bench's
// own polling and snapshots, not counted).
func classify(q string) string {
	switch {
	case strings.HasPrefix(q, "shop_"), q == "VACUUM shop.orders":
		return "business"
	case strings.HasPrefix(q, "bench_"), strings.Contains(q, "pg_stat_statements"), strings.Contains(q, "pg_stat_activity"),
		strings.Contains(q, "pg_current_wal_lsn"), q == "CHECKPOINT":
		return ""
	case q == "BEGIN", q == "COMMIT", q == "ROLLBACK", strings.HasPrefix(q, "begin"), strings.HasPrefix(q, "commit"):
		return "txn"
	}
	return "queue"
}

func produceOne(ctx context.Context, pool *pgxpool.Pool, enqueue func(context.Context, pgx.Tx, int64) error, after func(context.Context, int64) error) error {
	var id int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, insertOrder, rand.Int64N(100_000), "SKU-"+strconv.Itoa(rand.IntN(1e6)),
			1+rand.IntN(5), 100+rand.Int64N(100_000), text(160), text(40)).Scan(&id); err != nil {
			return err
		}
		if enqueue != nil {
			return enqueue(ctx, tx, id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if after != nil {
		return after(ctx, id)
	}
	return nil
}

func report(out io.Writer, c config, info pgutil.ServerInfo, rs []result) {
	fmt.Fprintf(out, "# whentomove: %d CPUs, PostgreSQL %s (stock settings: fsync, synchronous_commit, full_page_writes on), %v per run\n\n",
		runtime.NumCPU(), shortVersion(info.Version), c.duration)
	base := map[int]result{}
	for _, r := range rs {
		if r.variant == "business" {
			base[r.offered] = r
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| variant\t offered/s\t achieved/s\t jobs\t WAL KB/1k jobs\t server CPU ms/1k jobs\t queue WAL B/job\t queue CPU µs/job\t queue share WAL\t queue share CPU\t stmt WAL business/queue KB/1k\t stmt exec ms business/queue/txn /1k\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	per1k := func(x float64, n int) float64 { return x * 1000 / float64(max(n, 1)) }
	for _, r := range rs {
		wal := per1k(float64(r.walBytes), r.jobs) / 1024
		cpu := per1k(float64(r.cpu)/float64(time.Millisecond), r.jobs)
		shareW, shareC, qW, qC := "–", "–", "–", "–"
		if b, ok := base[r.offered]; ok && r.variant != "business" {
			bw := per1k(float64(b.walBytes), b.jobs) / 1024
			bc := per1k(float64(b.cpu)/float64(time.Millisecond), b.jobs)
			shareW, shareC = pct((wal-bw)/wal), pct((cpu-bc)/cpu)
			// per job: KB/1k jobs = B/job x 1.024; ms/1k jobs = µs/job
			qW, qC = fmt.Sprintf("%.0f", (wal-bw)*1.024), fmt.Sprintf("%.0f", cpu-bc)
		}
		fmt.Fprintf(tw, "| %s\t %d\t %.0f\t %d\t %.0f\t %.0f\t %s\t %s\t %s\t %s\t %.0f / %.0f\t %.0f / %.0f / %.0f\t\n",
			r.variant, r.offered, r.achieved, r.jobs, wal, cpu, qW, qC, shareW, shareC,
			per1k(r.stmtWAL["business"], r.jobs)/1024, per1k(r.stmtWAL["queue"], r.jobs)/1024,
			per1k(r.stmtMs["business"], r.jobs), per1k(r.stmtMs["queue"], r.jobs), per1k(r.stmtMs["txn"], r.jobs))
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	fmt.Fprintln(out, "queue WAL / CPU per job: the variant's minus business's at the same rate. stmt: pg_stat_statements (execution only;")
	fmt.Fprintln(out, "commit records and the WAL of COMMIT are in the totals, not in the statement columns).")
	fmt.Fprintln(out)
	for _, r := range rs {
		var parts []string
		for i, s := range r.topQueue {
			if i == 6 {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %.0f B/job %.0f µs/job", s.Query, float64(s.WALBytes)/float64(max(r.jobs, 1)), s.TotalMs*1000/float64(max(r.jobs, 1))))
		}
		line := fmt.Sprintf("- %s @%d/s: drain %v", r.variant, r.offered, r.drain.Round(time.Millisecond))
		if r.producerErrs > 0 {
			line += fmt.Sprintf(", %d producer errors", r.producerErrs)
		}
		if len(parts) > 0 {
			line += "; top queue statements by WAL: " + strings.Join(parts, "; ")
		}
		for _, n := range r.notes {
			line += "; " + n
		}
		fmt.Fprintln(out, line)
	}
}

// shortVersion turns "PostgreSQL 15.20 (Debian ...) on ..." into "15.20".
func shortVersion(v string) string {
	if f := strings.Fields(v); len(f) >= 2 {
		return f[1]
	}
	return v
}

// pct formats a share as a whole percentage ("0%", never "-0%").
func pct(x float64) string {
	p := int(math.Round(100 * x))
	return strconv.Itoa(p) + "%"
}
