package tenureprom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenureq/tenure/tenureprom"
	"github.com/tenureq/tenure/worker"
)

// A worker process exports its engine metrics; one process (here the same one) also exports
// the cluster's view from the database.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	// ... worker.Register handlers, then w.Start(ctx) ...

	reg := prometheus.NewRegistry()
	reg.MustRegister(tenureprom.NewEngineCollector(w))
	cluster, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{MaxDeadCodeSeries: 50})
	if err != nil {
		log.Fatal(err)
	}
	reg.MustRegister(cluster)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// go http.ListenAndServe(":9464", nil)
}
