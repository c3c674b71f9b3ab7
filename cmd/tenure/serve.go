package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenureq/tenure/tenureprom"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve the cluster metrics (queues, dead codes, worker registry) on /metrics for Prometheus",
		run:     runServe,
	})
}

const serveUsage = `Usage: tenure serve [flags]

Serves Prometheus metrics of the whole cluster on http://ADDR/metrics: jobs per queue, kind,
priority and state, the oldest ready job's age, dead jobs by error code, and the worker
registry (tenureprom.ClusterCollector). Run one per cluster; each worker process exports its
own engine metrics (tenureprom.EngineCollector). A scrape serves the latest snapshot of the
statements' results: it starts a refresh when the snapshot is older than -max-age and waits
for it at most -scrape-wait (tenure_cluster_snapshot_age_seconds says how old the numbers
are). Stops on SIGINT/SIGTERM.`

func runServe(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "serve", serveUsage)
	dbURL := databaseFlag(fs)
	addr := fs.String("addr", "127.0.0.1:9464", "listen address")
	timeout := fs.Duration("scrape-timeout", 5*time.Second, "bound on one refresh's statements")
	maxAge := fs.Duration("max-age", 0, "serve a snapshot younger than this without running the statements (0: 10 times its refresh's duration; negative: refresh at every scrape)")
	wait := fs.Duration("scrape-wait", 25*time.Millisecond, "how long a scrape waits for its refresh before serving the previous snapshot (negative: always wait)")
	if code, done := parseFlags(e, fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		return exitCode(e, "tenure serve", usageErrorf("unexpected arguments: %v", fs.Args()))
	}
	url, err := databaseURL(e, *dbURL)
	if err != nil {
		return exitCode(e, "tenure serve", err)
	}
	pool, err := openPool(ctx, url)
	if err != nil {
		return exitCode(e, "tenure serve", err)
	}
	defer pool.Close()
	col, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{Timeout: *timeout, MaxAge: *maxAge, Wait: *wait})
	if err != nil {
		return exitCode(e, "tenure serve", err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(col); err != nil {
		return exitCode(e, "tenure serve", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return exitCode(e, "tenure serve", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stdout, "serving metrics on http://%s/metrics\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return exitCode(e, "tenure serve", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return exitCode(e, "tenure serve", err)
	}
	return exitOK
}
