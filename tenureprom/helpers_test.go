package tenureprom_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker"
)

type okArgs struct {
	N int `json:"n"`
}

func (okArgs) Kind() string        { return "ok" }
func (okArgs) PayloadVersion() int { return 1 }

type flakyArgs struct {
	FailFirst int `json:"fail_first"`
}

func (flakyArgs) Kind() string        { return "flaky" }
func (flakyArgs) PayloadVersion() int { return 1 }

// startWorker starts a worker on queues "default" and "mail" that runs okArgs (succeeds)
// and flakyArgs (fails its first FailFirst attempts, then succeeds).
func startWorker(t *testing.T, pool *pgxpool.Pool, id string) *worker.Worker {
	t.Helper()
	w, err := worker.New(pool, &worker.Config{
		ID:     id,
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: 4}, "mail": {Concurrency: 2}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FetchPollMin: 10 * time.Millisecond,
		FetchPollMax: 100 * time.Millisecond, ReclaimEvery: 100 * time.Millisecond, RegistryEvery: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[okArgs]) error { return nil }, nil)
	worker.MustRegister(w, func(_ context.Context, j *generics.Job[flakyArgs]) error {
		if j.Attempt <= j.Args.FailFirst {
			return fmt.Errorf("attempt %d fails", j.Attempt)
		}
		return nil
	}, &worker.HandlerOptions{Queue: "mail", MaxAttempts: 3, Retry: worker.FullJitter{Base: time.Millisecond, Cap: 2 * time.Millisecond}})
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// scrape serves reg through promhttp, GETs /metrics as text and parses it with expfmt.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, string(body))
	return fams
}

// checkSeries fails on duplicate series and on label names outside allowed; it returns the
// series as "name{k=v,...}" strings.
func checkSeries(t *testing.T, fams map[string]*dto.MetricFamily, allowed map[string]bool) map[string]*dto.Metric {
	t.Helper()
	out := map[string]*dto.Metric{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				require.True(t, allowed[l.GetName()], "%s: unexpected label %q", name, l.GetName())
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			key := name + "{" + strings.Join(ls, ",") + "}"
			_, dup := out[key]
			require.False(t, dup, "duplicate series %s", key)
			out[key] = m
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}
