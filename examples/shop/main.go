// Command shop is Tenure's example service: a small shop that writes each order and enqueues
// its jobs in one business transaction, and an embedded worker that runs them.
//
// Per order it enqueues, with the helpers tenuregen generated in package shopjobs:
//
//   - shop.charge_card (priority 3): charges the card through worker.Effect against an
//     in-process fake payment service that deduplicates by Idempotency-Key; some responses
//     are "lost" after the charge was applied, and some attempts "crash" after it, so
//     charges are retried, yet applied exactly once;
//   - shop.send_receipt (priority 2): some attempts fail transiently and are retried; every
//     50th order is enqueued by a "legacy checkout" at payload version 1 and upgraded;
//   - shop.cleanup_cart (priority 1): low priority, completed in its own transaction
//     (worker.CompleteTx);
//   - and every -report-every orders, shop.build_report on its own queue: it works longer
//     than its 2 s lease, which the engine's heartbeat keeps alive.
//
// And a periodic job: shop.sales_summary every -summary-every (a nightly report in
// production, on a short interval here), one job per tick, plus one at start.
//
// The main queue shares its handlers between priorities with quotas and aging. The program
// shows progress once a second, stops by itself when every job is final (or on SIGINT /
// SIGTERM, gracefully), and prints a summary; it exits 1 if a job died or a charge was not
// applied exactly once.
//
// Database: the server named by $DATABASE_URL, else one found or started by
// internal/pgserver (a trusting server on 127.0.0.1:5432, else a throwaway cluster from the
// local PostgreSQL binaries, stopped at exit). On that server the program recreates its own
// database (-db, default tenure_demo), migrates it and creates its orders table.
//
//	go run ./examples/shop [-orders 1500] [-report-every 100] [-report-work 5s] [-v]
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/tenureq/tenure/tenureprom"
	"io"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"
)

// config is one run's settings.
type config struct {
	URL         string // server URL; empty: $DATABASE_URL, else pgserver.Ensure
	DB          string // database to recreate and use
	DropDB      bool   // drop the database at the end
	Orders      int
	Producers   int
	ReportEvery int
	ReportWork  time.Duration
	// SummaryEvery is the interval of the periodic sales summary.
	SummaryEvery time.Duration
	Concurrency  int // handlers of the main queue

	LostRate     float64 // payment responses lost after the charge was applied
	CrashRate    float64 // charge attempts that fail after the charge was recorded
	MailFailRate float64 // receipt attempts that fail transiently

	MaxRun  time.Duration // give up (stop gracefully) after this long
	Verbose bool

	MetricsAddr   string        // serve Prometheus metrics (engine + cluster) here at /metrics; empty: not at all
	MetricsLinger time.Duration // keep serving them (and the dashboard) this long after the run
	UIAddr        string        // serve the web dashboard (tenureui) here at /ui/; empty: not at all
	UIActions     bool          // enable the dashboard's actions (actor "shop-demo")
	onUI          func(url string)
	uiRefresh     time.Duration // tests: the dashboard's refresh (default 2 s)
	// tests: the cluster collector's configuration (nil: its defaults, which may serve a
	// snapshot older than a short run)
	clusterMetrics *tenureprom.ClusterConfig
	onMetrics      func(url string)
	Out            io.Writer
	Log            io.Writer // worker logs (errors only unless Verbose)
}

func defaultConfig() config {
	return config{
		DB: "tenure_demo", Orders: 1500, Producers: 4, ReportEvery: 100, ReportWork: 5 * time.Second, SummaryEvery: 2 * time.Second,
		Concurrency: 16, LostRate: 0.03, CrashRate: 0.03, MailFailRate: 0.15, MaxRun: 5 * time.Minute,
		Out: os.Stdout, Log: os.Stderr,
	}
}

var dbNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (c config) validate() error {
	switch {
	case !dbNameRE.MatchString(c.DB):
		return fmt.Errorf("-db %q: want a lower-case identifier", c.DB)
	case c.UIActions && c.UIAddr == "":
		return fmt.Errorf("-ui-actions needs -ui-addr")
	case c.Orders < 1 || c.Orders > 1_000_000:
		return fmt.Errorf("-orders must be within 1..1000000")
	case c.Producers < 1 || c.Producers > 64:
		return fmt.Errorf("-producers must be within 1..64")
	case c.ReportEvery < 1:
		return fmt.Errorf("-report-every must be >= 1")
	case c.ReportWork < 0 || c.ReportWork > 25*time.Second:
		return fmt.Errorf("-report-work must be within 0..25s")
	case c.SummaryEvery < time.Second || c.SummaryEvery > time.Hour:
		return fmt.Errorf("-summary-every must be within 1s..1h")
	case c.MetricsLinger < 0 || c.MetricsLinger > time.Hour:
		return fmt.Errorf("-metrics-linger must be within 0..1h")
	case c.Concurrency < 1 || c.Concurrency > 200:
		return fmt.Errorf("-concurrency must be within 1..200")
	case c.LostRate < 0 || c.LostRate > 0.5 || c.CrashRate < 0 || c.CrashRate > 0.5 || c.MailFailRate < 0 || c.MailFailRate > 0.5:
		return fmt.Errorf("failure rates must be within 0..0.5")
	}
	return nil
}

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.DB, "db", cfg.DB, "database to (re)create on the server and use")
	flag.BoolVar(&cfg.DropDB, "drop-db", false, "drop the database at the end (default: keep it for inspection)")
	flag.IntVar(&cfg.Orders, "orders", cfg.Orders, "orders to place (each enqueues 3 jobs)")
	flag.IntVar(&cfg.Producers, "producers", cfg.Producers, "concurrent order writers")
	flag.IntVar(&cfg.ReportEvery, "report-every", cfg.ReportEvery, "enqueue one slow report per this many orders")
	flag.DurationVar(&cfg.ReportWork, "report-work", cfg.ReportWork, "how long a report works (its lease is 2s)")
	flag.DurationVar(&cfg.SummaryEvery, "summary-every", cfg.SummaryEvery, "interval of the periodic sales summary (whole seconds; >= 1s)")
	flag.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "handlers of the main queue")
	flag.Float64Var(&cfg.LostRate, "lost-rate", cfg.LostRate, "fraction of payment responses lost after the charge was applied")
	flag.Float64Var(&cfg.CrashRate, "crash-rate", cfg.CrashRate, "fraction of charge attempts failing after the charge was recorded")
	flag.Float64Var(&cfg.MailFailRate, "mail-fail-rate", cfg.MailFailRate, "fraction of receipt attempts failing transiently")
	flag.DurationVar(&cfg.MaxRun, "max-run", cfg.MaxRun, "stop (gracefully) after this long even if jobs remain")
	flag.BoolVar(&cfg.Verbose, "v", false, "log the worker's info and warnings (every failed attempt)")
	flag.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics (engine and cluster collectors) on this address at /metrics, e.g. 127.0.0.1:9464")
	flag.DurationVar(&cfg.MetricsLinger, "metrics-linger", 0, "with -metrics-addr or -ui-addr: keep serving this long after the run ends")
	flag.StringVar(&cfg.UIAddr, "ui-addr", "", "serve the web dashboard (tenureui) on this address at /ui/, e.g. 127.0.0.1:8080")
	flag.BoolVar(&cfg.UIActions, "ui-actions", false, "with -ui-addr: enable the dashboard's actions (audited as actor shop-demo; local use only)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "shop: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(2)
	}
	cfg.URL = os.Getenv("DATABASE_URL")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	sum, err := run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
	if problems := sum.problems(); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "shop: FAIL:", p)
		}
		os.Exit(1)
	}
	if sum.Interrupted != "" {
		os.Exit(130)
	}
}
