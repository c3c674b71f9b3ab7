package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"

	"github.com/tenureq/tenure/examples/shop/shopjobs"
)

// legacyReceipt is how the legacy checkout still enqueues receipts: at payload version 1.
// It goes through a client without a registry (a registry-bound client refuses versions
// other than the registered one); the worker upgrades it before the handler sees it.
type legacyReceipt shopjobs.SendReceiptV1

func (legacyReceipt) Kind() string        { return shopjobs.KindSendReceipt }
func (legacyReceipt) PayloadVersion() int { return 1 }

const legacyEvery = 50 // every 50th order comes from the legacy checkout

// checkoutRetryEvery: every 10th order's checkout enqueues its receipt a second time after
// committing (a client retry); the receipt is unique by order, so that insert returns the
// existing job.
const checkoutRetryEvery = 10

// receiptUnique is the legacy checkout's copy of the receipt's uniqueness (the generated
// EnqueueSendReceipt helpers apply the directive's; the legacy client inserts by hand).
var receiptUnique = &jobs.UniqueOpts{Fields: []string{"order_id"}, States: []generics.JobState{generics.JobStateSucceeded}}

// checkoutStats counts the checkout retries and how many of them came back as duplicates.
type checkoutStats struct {
	retries, duplicates atomic.Int64
}

// run is the whole program: database, worker, producers, progress, summary. It returns when
// every job is final, when ctx ends (SIGINT/SIGTERM) or after cfg.MaxRun, always after a
// graceful worker stop.
func run(ctx context.Context, cfg config) (*summary, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	logf := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	// Database work that must finish even after an interrupt uses bg.
	bg := context.WithoutCancel(ctx)

	serverURL := cfg.URL
	if serverURL == "" {
		srv, err := pgserver.Ensure(ctx, logf)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := srv.Stop(); err != nil {
				logf("shop: stopping PostgreSQL: %v", err)
			}
		}()
		serverURL = srv.URL
	} else {
		logf("postgres: using $DATABASE_URL")
	}
	dbURL, err := recreateDB(ctx, serverURL, cfg.DB)
	if err != nil {
		return nil, err
	}
	if cfg.DropDB {
		defer func() {
			if err := dropDB(bg, serverURL, cfg.DB); err != nil {
				logf("shop: dropping database %s: %v", cfg.DB, err)
			}
		}()
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(cfg.Concurrency + cfg.Producers + 8)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("create tables: %w", err)
	}
	logf("database %s: recreated, migrated, orders table created", cfg.DB)

	pay := newPaymentService(cfg.LostRate)
	defer pay.Close()
	s := &shop{pool: pool, pay: newPaymentClient(pay.srv.URL), cfg: cfg}

	level := slog.LevelError
	if cfg.Verbose {
		level = slog.LevelInfo
	}
	logOut := cfg.Log
	if logOut == nil {
		logOut = io.Discard
	}
	w, err := worker.New(pool, &worker.Config{
		Queues: map[string]worker.QueueConfig{
			// The main queue: of every 10 jobs a claim takes, 6 charges, 3 receipts and 1
			// cleanup while all three wait (unused shares flow to the others), and a job
			// competes one priority higher for every 5s it waited, up to high (3).
			shopjobs.QueueShop: {Concurrency: cfg.Concurrency, Fairness: worker.Fairness{
				Quotas: map[int]int{jobs.PriorityHigh: 6, jobs.PriorityNormal: 3, jobs.PriorityLow: 1},
				Aging:  &worker.Aging{Step: 5 * time.Second, Ceiling: jobs.PriorityHigh},
			}},
			// The slow reports get their own queue and handlers, so they never hold the
			// main queue's slots.
			shopjobs.QueueReports: {Concurrency: 4},
		},
		// The periodic sales summary ("nightly" in production: worker.Cron("0 2 * * *", tz)):
		// every SummaryEvery, one job per tick whatever the number of workers, and one at start.
		Periodic: []worker.PeriodicJob{worker.NewPeriodicJob("sales-summary", worker.Every(cfg.SummaryEvery),
			func(ctx context.Context, t worker.Tick) (shopjobs.SalesSummary, error) {
				return shopjobs.SalesSummary{Tick: t.At, Missed: t.Missed}, nil
			}, &worker.PeriodicOptions{RunOnStart: true})},
		Logger:       slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})),
		FetchPollMin: 20 * time.Millisecond,
		FetchPollMax: 500 * time.Millisecond,
		ReclaimEvery: 500 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	if err := shopjobs.RegisterHandlers(w, s); err != nil {
		return nil, err
	}
	if err := checkQueues(w); err != nil {
		return nil, err
	}
	client, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	if err != nil {
		return nil, err
	}
	legacy, err := jobs.NewClient(pool, nil)
	if err != nil {
		return nil, err
	}

	// The worker's lifetime is ours: cancelling Start's context would begin a graceful
	// stop on its own; the interrupt handling below stops it with the demo's own budget.
	if err := w.Start(bg); err != nil {
		return nil, err
	}
	if cfg.MetricsAddr != "" {
		url, stopMetrics, err := serveMetrics(w, pool, cfg.MetricsAddr, cfg.clusterMetrics)
		if err != nil {
			stopCtx, cancel := context.WithTimeout(bg, 10*time.Second)
			_ = w.Stop(stopCtx)
			cancel()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		defer stopMetrics()
		logf("metrics: serving %s", url)
		if cfg.onMetrics != nil {
			cfg.onMetrics(url)
		}
	}
	if cfg.UIAddr != "" {
		url, stopUI, err := serveUI(pool, legacy, cfg.UIAddr, cfg.UIActions, cfg.uiRefresh)
		if err != nil {
			stopCtx, cancel := context.WithTimeout(bg, 10*time.Second)
			_ = w.Stop(stopCtx)
			cancel()
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		defer stopUI()
		logf("dashboard: serving %s", url)
		if cfg.onUI != nil {
			cfg.onUI(url)
		}
	}
	start := time.Now()
	logf("worker started: queue %s (%d handlers, quotas 6/3/1 + aging), queue %s (4 handlers); placing %d orders with %d writers",
		shopjobs.QueueShop, cfg.Concurrency, shopjobs.QueueReports, cfg.Orders, cfg.Producers)

	var placed, next atomic.Int64
	var checkout checkoutStats
	var wg sync.WaitGroup
	var prodErr error
	var prodOnce sync.Once
	prodCtx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	for range cfg.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				id := next.Add(1)
				if id > int64(cfg.Orders) || prodCtx.Err() != nil {
					return
				}
				if err := placeOrder(prodCtx, pool, client, legacy, cfg, id, &checkout); err != nil {
					if prodCtx.Err() == nil {
						prodOnce.Do(func() { prodErr = fmt.Errorf("order %d: %w", id, err) })
						stopProducers()
					}
					return
				}
				placed.Add(1)
			}
		}()
	}
	producersDone := make(chan struct{})
	go func() { wg.Wait(); close(producersDone) }()

	sum := &summary{cfg: cfg, checkout: &checkout}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint, lastFinal := start, int64(0)
	finished := false
	for !finished {
		select {
		case <-ctx.Done():
			sum.Interrupted = "signal"
		case <-tick.C:
		}
		if sum.Interrupted != "" {
			break
		}
		if time.Since(start) > cfg.MaxRun {
			sum.Interrupted = fmt.Sprintf("-max-run %v reached", cfg.MaxRun)
			break
		}
		done := false
		select {
		case <-producersDone:
			done = true
		default:
		}
		if done && prodErr != nil {
			break
		}
		now := time.Now()
		due := now.Sub(lastPrint) >= 900*time.Millisecond // print about once a second
		if !done && !due {
			continue
		}
		st, err := jobStates(bg, pool)
		if err != nil {
			return nil, err
		}
		final := st.final()
		if due {
			rate := float64(final-lastFinal) / now.Sub(lastPrint).Seconds()
			ws := w.Stats()
			logf("[%4.0fs] orders %d/%d | ready %d retrying %d running %d | succeeded %d dead %d | %4.0f jobs/s | retries %d heartbeats %d",
				now.Sub(start).Seconds(), placed.Load(), cfg.Orders, st.ready, st.scheduled, st.running,
				st.succeeded, st.dead, rate, ws.Retried, ws.Heartbeats)
			lastPrint, lastFinal = now, final
		}
		finished = done && st.total > 0 && final == st.total
		if done && placed.Load() == 0 {
			finished = true
		}
	}
	stopProducers()
	<-producersDone
	if sum.Interrupted != "" {
		logf("stopping (%s): no new claims; running handlers get up to 10s to finish", sum.Interrupted)
	}
	stopCtx, cancel := context.WithTimeout(bg, 10*time.Second)
	stopErr := w.Stop(stopCtx)
	cancel()
	sum.Elapsed = time.Since(start)
	if prodErr != nil {
		return nil, prodErr
	}
	if stopErr != nil {
		logf("worker stop: %v", stopErr)
	}
	if err := sum.collect(bg, pool, w, pay, s); err != nil {
		return nil, err
	}
	sum.print(out)
	if (cfg.MetricsAddr != "" || cfg.UIAddr != "") && cfg.MetricsLinger > 0 && sum.Interrupted == "" {
		logf("metrics and dashboard: serving for %v more (Ctrl-C to end)", cfg.MetricsLinger)
		select {
		case <-ctx.Done():
		case <-time.After(cfg.MetricsLinger):
		}
	}
	return sum, nil
}

// schema is the example's own business table (public schema), next to Tenure's.
const schema = `
CREATE TABLE orders (
    id              bigint PRIMARY KEY,
    email           text   NOT NULL,
    amount_cents    bigint NOT NULL,
    currency        text   NOT NULL,
    status          text   NOT NULL DEFAULT 'new',
    charge_id       text   UNIQUE,
    receipt_sent_at timestamptz,
    receipt_lang    text,
    cleaned_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE sales_summaries (
    tick          timestamptz PRIMARY KEY,
    missed        integer NOT NULL,
    orders        bigint  NOT NULL,
    paid          bigint  NOT NULL,
    revenue_cents bigint  NOT NULL,
    built_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE reports (
    from_order    bigint PRIMARY KEY,
    to_order      bigint NOT NULL,
    orders        bigint NOT NULL,
    paid          bigint NOT NULL,
    revenue_cents bigint NOT NULL,
    built_at      timestamptz NOT NULL DEFAULT now()
);`

// placeOrder writes the order and enqueues its jobs in ONE transaction: either the order
// and all its jobs exist, or none of them.
// Every checkoutRetryEvery-th order then enqueues its receipt again, as a retrying client
// would: the receipt is unique by order, so no second job appears.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, c, legacy *jobs.Client, cfg config, id int64, st *checkoutStats) error {
	currencies := []string{"EUR", "USD", "KRW"}
	langs := []string{"en", "ko", "de"}
	email := fmt.Sprintf("customer%d@example.com", id)
	amount := 100 + (id*7919)%99_900
	currency := currencies[id%3]
	items := []shopjobs.Item{{SKU: fmt.Sprintf("sku-%d", id%17), Qty: int(1 + id%3)}}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, email, amount_cents, currency) VALUES ($1, $2, $3, $4)`,
			id, email, amount, currency); err != nil {
			return err
		}
		if _, err := shopjobs.EnqueueChargeCardTx(ctx, c, tx, shopjobs.ChargeCard{
			OrderID: id, AmountCents: amount, Currency: currency, CardToken: fmt.Sprintf("tok_%d", id),
		}, nil); err != nil {
			return err
		}
		if id%legacyEvery == 0 {
			if _, err := legacy.InsertTx(ctx, tx, legacyReceipt{OrderID: id, Email: email, Items: items},
				&jobs.InsertOpts{Queue: shopjobs.QueueShop, MaxAttempts: 10, Unique: receiptUnique}); err != nil {
				return err
			}
		} else if _, err := shopjobs.EnqueueSendReceiptTx(ctx, c, tx, shopjobs.SendReceipt{
			OrderID: id, Email: email, Lang: langs[id%3], Items: items,
		}, nil); err != nil {
			return err
		}
		if _, err := shopjobs.EnqueueCleanupCartTx(ctx, c, tx, shopjobs.CleanupCart{OrderID: id}, nil); err != nil {
			return err
		}
		if id%int64(cfg.ReportEvery) == 0 {
			if _, err := shopjobs.EnqueueBuildReportTx(ctx, c, tx, shopjobs.BuildReport{
				FromOrder: id - int64(cfg.ReportEvery) + 1, ToOrder: id, Work: cfg.ReportWork,
			}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || id%checkoutRetryEvery != 0 {
		return err
	}
	st.retries.Add(1)
	row, err := shopjobs.EnqueueSendReceipt(ctx, c, shopjobs.SendReceipt{
		OrderID: id, Email: email, Lang: langs[id%3], Items: items,
	}, nil)
	if err != nil {
		return fmt.Errorf("checkout retry: %w", err)
	}
	if row.Duplicate {
		st.duplicates.Add(1)
	}
	return nil
}

// checkQueues makes sure every registered kind's default queue is worked by w: a kind whose
// queue no worker claims from would wait forever.
func checkQueues(w *worker.Worker) error {
	queues := map[string]bool{shopjobs.QueueShop: true, shopjobs.QueueReports: true}
	for _, k := range w.Registry().Kinds() {
		info, _ := w.Registry().Lookup(k)
		if q := info.Defaults.Queue; q != "" && !queues[q] {
			return fmt.Errorf("kind %s defaults to queue %q, which this worker does not run", k, q)
		}
	}
	return nil
}

func recreateDB(ctx context.Context, serverURL, name string) (string, error) {
	if err := dropDB(ctx, serverURL, name); err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return pgserver.DatabaseURL(serverURL, name), nil
}

func dropDB(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

type states struct {
	ready, scheduled, running, succeeded, dead, cancelled, total int64
}

func (s states) final() int64 { return s.succeeded + s.dead + s.cancelled }

func jobStates(ctx context.Context, pool *pgxpool.Pool) (states, error) {
	var s states
	err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE state = 'ready' AND run_at <= now()),
		       count(*) FILTER (WHERE state = 'ready' AND run_at > now()),
		       count(*) FILTER (WHERE state = 'running'),
		       count(*) FILTER (WHERE state = 'succeeded'),
		       count(*) FILTER (WHERE state = 'dead'),
		       count(*) FILTER (WHERE state = 'cancelled'),
		       count(*)
		FROM tenure.jobs`).Scan(&s.ready, &s.scheduled, &s.running, &s.succeeded, &s.dead, &s.cancelled, &s.total)
	return s, err
}

// summary is what a run did, from the database, the worker's counters, the payment service
// and the handlers.
type summary struct {
	cfg         config
	Interrupted string // why the run stopped before every job was final ("" if it did not)
	Elapsed     time.Duration
	Placed      int64

	States states
	Kinds  []kindStats
	Worker worker.Stats

	PaymentRequests, ChargesApplied, PaymentReplayed, LostResponses int64
	EffectCalls, LedgerReplays, Crashes                             int64
	LedgerRows, OrdersPaid, DistinctCharges, ReceiptsSent, Cleaned  int64
	MailsSent, MailFailures                                         int64
	Reports                                                         int
	ReportShortest, ReportLongest, ReportLease                      time.Duration
	LegacyReceipts                                                  int64
	// SummaryJobs: periodic sales-summary jobs enqueued; SummaryTicks: distinct ticks among
	// them (equal: one job per tick); SummaryPending: those still ready (a tick enqueued as the
	// worker stopped claiming); Summaries: summary rows written.
	SummaryJobs, SummaryTicks, SummaryPending, Summaries int64

	// Checkout retries that enqueued a receipt again, how many of them returned the existing
	// job (all, since receipts are unique by order), and the receipt jobs stored.
	CheckoutRetries, ReceiptDuplicates, ReceiptJobs int64

	checkout *checkoutStats
}

type kindStats struct {
	Kind                      string
	Jobs, Succeeded, Attempts int64
}

func (s *summary) collect(ctx context.Context, pool *pgxpool.Pool, w *worker.Worker, pay *paymentService, sh *shop) error {
	var err error
	if s.States, err = jobStates(ctx, pool); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `
		SELECT kind, count(*), count(*) FILTER (WHERE state = 'succeeded'), coalesce(sum(attempts), 0)
		FROM tenure.jobs GROUP BY kind ORDER BY kind`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k kindStats
		if err := rows.Scan(&k.Kind, &k.Jobs, &k.Succeeded, &k.Attempts); err != nil {
			return err
		}
		s.Kinds = append(s.Kinds, k)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.effects WHERE name = 'charge'`).Scan(&s.LedgerRows); err != nil {
		return err
	}
	// Placed counts committed orders (a commit racing an interrupt may succeed on the server
	// while the client sees an error).
	if err := pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE status = 'paid'), count(DISTINCT charge_id),
		       count(*) FILTER (WHERE receipt_sent_at IS NOT NULL), count(*) FILTER (WHERE cleaned_at IS NOT NULL)
		FROM orders`).Scan(&s.Placed, &s.OrdersPaid, &s.DistinctCharges, &s.ReceiptsSent, &s.Cleaned); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE payload_version = 1), count(*) FROM tenure.jobs WHERE kind = $1`,
		shopjobs.KindSendReceipt).Scan(&s.LegacyReceipts, &s.ReceiptJobs); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT payload->>'tick'), count(*) FILTER (WHERE state = 'ready'),
		(SELECT count(*) FROM sales_summaries) FROM tenure.jobs WHERE kind = $1`,
		shopjobs.KindSalesSummary).Scan(&s.SummaryJobs, &s.SummaryTicks, &s.SummaryPending, &s.Summaries); err != nil {
		return err
	}
	if s.checkout != nil {
		s.CheckoutRetries, s.ReceiptDuplicates = s.checkout.retries.Load(), s.checkout.duplicates.Load()
	}
	s.Worker = w.Stats()
	s.PaymentRequests, s.PaymentReplayed, s.LostResponses = pay.requests.Load(), pay.replayed.Load(), pay.lost.Load()
	s.ChargesApplied = int64(pay.count())
	s.EffectCalls, s.LedgerReplays, s.Crashes = sh.chargeCalls.Load(), sh.ledgerReplays.Load(), sh.crashes.Load()
	s.MailsSent, s.MailFailures = sh.mailsSent.Load(), sh.mailFailures.Load()
	sh.reportsMu.Lock()
	s.Reports, s.ReportShortest, s.ReportLongest, s.ReportLease = sh.reportsDone, sh.reportShortest, sh.reportLongest, sh.reportLease
	sh.reportsMu.Unlock()
	return nil
}

// exactlyOnce reports whether every applied charge is in the ledger and on exactly one paid
// order, and (when the run completed) every order was charged.
func (s *summary) exactlyOnce() bool {
	ok := s.ChargesApplied == s.LedgerRows && s.LedgerRows == s.OrdersPaid && s.OrdersPaid == s.DistinctCharges
	if s.Interrupted == "" {
		ok = ok && s.OrdersPaid == s.Placed
	}
	return ok
}

// problems lists what makes the run a failure. An interrupted run is not a failure in
// itself, but its charges must still never have been applied twice.
func (s *summary) problems() []string {
	var out []string
	if s.Interrupted != "" {
		if s.LedgerRows > s.ChargesApplied || s.OrdersPaid > s.LedgerRows {
			out = append(out, fmt.Sprintf("charges applied %d, ledger rows %d, orders paid %d: more records than charges", s.ChargesApplied, s.LedgerRows, s.OrdersPaid))
		}
		return out
	}
	if s.States.dead > 0 || s.States.cancelled > 0 {
		out = append(out, fmt.Sprintf("%d jobs dead, %d cancelled", s.States.dead, s.States.cancelled))
	}
	// A periodic tick can be enqueued between the last progress check and the stop; it waits
	// for the next run (ready), which is not a failure.
	if s.States.final() != s.States.total-s.SummaryPending {
		out = append(out, fmt.Sprintf("%d of %d jobs not final", s.States.total-s.States.final(), s.States.total))
	}
	if !s.exactlyOnce() {
		out = append(out, fmt.Sprintf("charges applied %d, ledger rows %d, orders paid %d (distinct charge ids %d), orders %d: not exactly once",
			s.ChargesApplied, s.LedgerRows, s.OrdersPaid, s.DistinctCharges, s.Placed))
	}
	if s.SummaryJobs != s.SummaryTicks {
		out = append(out, fmt.Sprintf("%d sales-summary jobs for %d ticks: a tick was enqueued twice", s.SummaryJobs, s.SummaryTicks))
	}
	if s.ReceiptJobs != s.Placed || s.ReceiptDuplicates != s.CheckoutRetries {
		out = append(out, fmt.Sprintf("%d receipt jobs for %d orders; %d of %d checkout retries were duplicates", s.ReceiptJobs, s.Placed, s.ReceiptDuplicates, s.CheckoutRetries))
	}
	if s.ReceiptsSent != s.Placed || s.Cleaned != s.Placed {
		out = append(out, fmt.Sprintf("receipts sent for %d and carts cleaned for %d of %d orders", s.ReceiptsSent, s.Cleaned, s.Placed))
	}
	return out
}

func (s *summary) print(out io.Writer) {
	secs := s.Elapsed.Seconds()
	final := s.States.final()
	status := "all jobs final"
	if s.Interrupted != "" {
		status = fmt.Sprintf("interrupted (%s): %d of %d jobs final", s.Interrupted, final, s.States.total)
	}
	fmt.Fprintf(out, "\n== summary: %d orders, %d jobs in %.1fs (%.0f jobs/s), %s\n", s.Placed, s.States.total, secs, float64(final)/secs, status)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "jobs by state\tsucceeded %d, dead %d, cancelled %d, ready %d (retrying %d), running %d\n",
		s.States.succeeded, s.States.dead, s.States.cancelled, s.States.ready, s.States.scheduled, s.States.running)
	if s.Interrupted != "" && s.States.running > 0 {
		fmt.Fprintf(tw, "\t(the %d running jobs were claimed as the worker stopped; when their leases expire, the next worker reclaims them)\n", s.States.running)
	}
	for i, k := range s.Kinds {
		label := ""
		if i == 0 {
			label = "by kind"
		}
		fmt.Fprintf(tw, "%s\t%-20s %5d jobs, %5d succeeded, %5d attempts\n", label, k.Kind, k.Jobs, k.Succeeded, k.Attempts)
	}
	ws := s.Worker
	fmt.Fprintf(tw, "retries\t%d (%s)\n", ws.Retried, codes(ws.ErrorCodes))
	fmt.Fprintf(tw, "lease events\theartbeats %d (%d lease extensions), leases lost %d, reclaimed %d, stale writes rejected %d\n",
		ws.Heartbeats, ws.HeartbeatRows, ws.LeasesLost, ws.Reclaimed, ws.StaleRejected)
	if s.Reports > 0 {
		fmt.Fprintf(tw, "slow reports\t%d built on a %v lease, each working %.1fs-%.1fs: kept alive by heartbeats\n",
			s.Reports, s.ReportLease, s.ReportShortest.Seconds(), s.ReportLongest.Seconds())
	}
	fmt.Fprintf(tw, "periodic summaries\t%d sales-summary jobs for %d ticks (every %v, one at start), %d summary rows, %d left ready at the stop\n",
		s.SummaryJobs, s.SummaryTicks, s.cfg.SummaryEvery, s.Summaries, s.SummaryPending)
	fmt.Fprintf(tw, "payload upgrades\t%d receipts stored at version 1 by the legacy checkout, handled as version 2\n", s.LegacyReceipts)
	fmt.Fprintf(tw, "receipts\t%d sent, %d attempts failed transiently and were retried\n", s.MailsSent, s.MailFailures)
	fmt.Fprintf(tw, "unique receipts\t%d checkout retries enqueued a receipt again: %d returned the existing job; %d receipt jobs for %d orders\n",
		s.CheckoutRetries, s.ReceiptDuplicates, s.ReceiptJobs, s.Placed)
	var waits []string
	for _, wt := range ws.Wait {
		waits = append(waits, fmt.Sprintf("%s/p%d p50 %v p99 %v", wt.Queue, wt.Priority, wt.P50.Round(time.Millisecond), wt.P99.Round(time.Millisecond)))
	}
	fmt.Fprintf(tw, "queue wait\t%s\n", strings.Join(waits, " | "))
	fmt.Fprintf(tw, "payment service\t%d requests: %d charges applied, %d answered from its idempotency store, %d responses lost after applying\n",
		s.PaymentRequests, s.ChargesApplied, s.PaymentReplayed, s.LostResponses)
	fmt.Fprintf(tw, "effect ledger\t%d charge records; %d remote calls, %d attempts served from the ledger (%d injected crashes after charging)\n",
		s.LedgerRows, s.EffectCalls, s.LedgerReplays, s.Crashes)
	verdict := "OK"
	if !s.exactlyOnce() {
		verdict = "FAILED"
	}
	fmt.Fprintf(tw, "exactly once\t%s: charges applied %d = ledger rows %d = orders paid %d (distinct charge ids %d) of %d orders\n",
		verdict, s.ChargesApplied, s.LedgerRows, s.OrdersPaid, s.DistinctCharges, s.Placed)
	tw.Flush()
}

func codes(m map[worker.ErrorCode]int64) string {
	if len(m) == 0 {
		return "no failures"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[worker.ErrorCode(k)])
	}
	return "failures by code: " + strings.Join(parts, ", ")
}
