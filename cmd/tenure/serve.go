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
	"github.com/tenureq/tenure/tenureui"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve the cluster metrics on /metrics for Prometheus, and with -ui the web dashboard on /ui/",
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
are). Stops on SIGINT/SIGTERM. Both the metrics and the dashboard read (and act on) the
schema -schema names (default $TENURE_SCHEMA, else tenure).

With -ui it also serves the web dashboard (package tenureui) on http://ADDR/ui/: queues per
priority band, workers, jobs, job details with their effects and audit trail. It is read-only
unless -ui-actions is given; actions need -ui-user, and then the whole dashboard asks for HTTP
basic auth with that user and the password in $TENURE_UI_PASSWORD (the user is the actor in the
audit trail). -ui-user alone protects a read-only dashboard. Basic auth sends the password with
every request: put TLS in front of it (a reverse proxy) beyond localhost.`

func runServe(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "serve", serveUsage)
	dbURL := databaseFlag(fs)
	addr := fs.String("addr", "127.0.0.1:9464", "listen address")
	timeout := fs.Duration("scrape-timeout", 5*time.Second, "bound on one refresh's statements")
	maxAge := fs.Duration("max-age", 0, "serve a snapshot younger than this without running the statements (0: 10 times its refresh's duration; negative: refresh at every scrape)")
	wait := fs.Duration("scrape-wait", 25*time.Millisecond, "how long a scrape waits for its refresh before serving the previous snapshot (negative: always wait)")
	ui := fs.Bool("ui", false, "also serve the web dashboard on /ui/")
	uiActions := fs.Bool("ui-actions", false, "enable the dashboard's operator actions (needs -ui-user)")
	uiUser := fs.String("ui-user", "", "basic-auth user of the dashboard (password: $TENURE_UI_PASSWORD)")
	if code, done := parseFlags(e, fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		return exitCode(e, "tenure serve", usageErrorf("unexpected arguments: %v", fs.Args()))
	}
	if !*ui && (*uiActions || *uiUser != "") {
		return exitCode(e, "tenure serve", usageErrorf("-ui-actions and -ui-user need -ui"))
	}
	if *uiActions && *uiUser == "" {
		return exitCode(e, "tenure serve", usageErrorf("-ui-actions needs -ui-user: every action is audited with its actor"))
	}
	password := e.getenv("TENURE_UI_PASSWORD")
	if *uiUser != "" && password == "" {
		return exitCode(e, "tenure serve", usageErrorf("-ui-user needs the password in $TENURE_UI_PASSWORD"))
	}
	pool, err := connect(ctx, e, *dbURL)
	if err != nil {
		return exitCode(e, "tenure serve", err)
	}
	defer pool.Close()
	col, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{Schema: e.schema, Timeout: *timeout, MaxAge: *maxAge, Wait: *wait})
	if err != nil {
		return exitCode(e, "tenure serve", err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(col); err != nil {
		return exitCode(e, "tenure serve", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if *ui {
		cfg := &tenureui.Config{Prefix: "/ui", EnableActions: *uiActions, Schema: e.schema}
		if *uiActions {
			cfg.Authorizer = tenureui.BasicAuthorizer(*uiUser, password)
		}
		h, err := tenureui.New(pool, cfg)
		if err != nil {
			return exitCode(e, "tenure serve", err)
		}
		var handler http.Handler = h
		if *uiUser != "" {
			handler = tenureui.BasicAuth(h, *uiUser, password, "tenure")
		}
		mux.Handle("/ui/", handler)
		mux.Handle("/{$}", http.RedirectHandler("/ui/", http.StatusFound))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return exitCode(e, "tenure serve", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stdout, "serving metrics on http://%s/metrics\n", ln.Addr())
	if *ui {
		mode := "read-only"
		if *uiActions {
			mode = "actions enabled for " + *uiUser
		}
		fmt.Fprintf(e.stdout, "serving the dashboard on http://%s/ui/ (%s)\n", ln.Addr(), mode)
	}
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
