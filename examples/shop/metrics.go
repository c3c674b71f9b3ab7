package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenureq/tenure/tenureprom"
	"github.com/tenureq/tenure/worker"
)

// serveMetrics serves the worker's engine metrics and the database's cluster metrics on addr
// at /metrics (tenureprom), and returns the URL and a function that stops the server.
// cluster configures the cluster collector (nil: its defaults).
func serveMetrics(w *worker.Worker, pool *pgxpool.Pool, addr string, cluster *tenureprom.ClusterConfig) (string, func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(tenureprom.NewEngineCollector(w))
	cc, err := tenureprom.NewClusterCollector(pool, cluster)
	if err != nil {
		return "", nil, err
	}
	reg.MustRegister(cc)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener failed; scrapes fail and show it
		}
	}()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
	return "http://" + l.Addr().String() + "/metrics", stop, nil
}
