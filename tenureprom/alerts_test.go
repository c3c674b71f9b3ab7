package tenureprom_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureprom"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var metricNameRE = regexp.MustCompile(`\btenure_[a-z0-9_]+\b`)

// servedMetrics runs a worker with finished, dead, ready and foreign running jobs, registers
// the engine and cluster collectors in one pedantic registry (which also proves their names
// never collide) and returns every metric name a scrape serves (histogram series included).
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w := startWorker(t, pool, "alerts-test")
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	require.NoError(t, err)
	_, err = c.InsertMany(ctx, []jobs.InsertManyParams{{Args: okArgs{}}, {Args: flakyArgs{FailFirst: 5}}})
	require.NoError(t, err)
	// Work no worker takes (an unregistered kind): a ready and a running job, as from
	// another deployment.
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload) VALUES ('elsewhere', '{}');
INSERT INTO tenure.jobs (kind, payload, state, attempts, locked_by, locked_until, claim_token, attempted_at, generation)
VALUES ('elsewhere', '{}', 'running', 1, 'other', now() + interval '1 hour', gen_random_uuid(), now(), 1)`)
	require.NoError(t, err)
	// A workflow task waiting on that foreign running job (the waiting-on-dependencies series).
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, state, deps_pending, workflow_id, task_name)
VALUES ('elsewhere', '{}', 'waiting', 1, gen_random_uuid(), 'after')`)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for st := w.Stats(); st.Succeeded < 1 || st.Dead < 1; st = w.Stats() {
		require.True(t, time.Now().Before(deadline), "jobs did not finish: %+v", st)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a registry refresh with the counters

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(tenureprom.NewEngineCollector(w)))
	cluster, err := tenureprom.NewClusterCollector(pool, nil)
	require.NoError(t, err)
	require.NoError(t, reg.Register(cluster))
	// The worker's registry row (and with it the per-worker series) is refreshed every 50 ms
	// here and aged out when stale: on a loaded machine one scrape can fall between the two.
	// Scrape until the per-worker series are there (bounded).
	served := map[string]bool{}
	deadline = time.Now().Add(10 * time.Second)
	for {
		fams := scrape(t, reg)
		for name, f := range fams {
			served[name] = true
			if f.GetType() == dto.MetricType_HISTOGRAM {
				served[name+"_bucket"], served[name+"_sum"], served[name+"_count"] = true, true, true
			}
		}
		if served["tenure_registered_worker_expired"] && served["tenure_registered_worker_last_success_age_seconds"] {
			return served
		}
		require.True(t, time.Now().Before(deadline), "the registered worker's series never appeared")
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAlertRulesUseServedMetrics parses alerts.yml and docs/operations.md and checks that every
// tenure_* metric they name is served by a running worker's engine and cluster collectors.
func TestAlertRulesUseServedMetrics(t *testing.T) {
	t.Parallel()
	served := servedMetrics(t)
	raw, err := os.ReadFile("alerts.yml")
	require.NoError(t, err)
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rf))
	require.Len(t, rf.Groups, 1)
	alerts := map[string]bool{}
	used := map[string]bool{}
	for _, r := range rf.Groups[0].Rules {
		require.NotEmpty(t, r.Alert)
		require.False(t, alerts[r.Alert], "duplicate alert %s", r.Alert)
		alerts[r.Alert] = true
		require.NotEmpty(t, r.Expr, r.Alert)
		require.NotEmpty(t, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		if r.For != "" {
			_, err := time.ParseDuration(r.For)
			require.NoError(t, err, r.Alert)
		}
		require.Equal(t, strings.Count(r.Expr, "("), strings.Count(r.Expr, ")"), "%s: unbalanced parentheses", r.Alert)
		names := metricNameRE.FindAllString(r.Expr, -1)
		require.NotEmpty(t, names, r.Alert)
		for _, n := range names {
			require.True(t, served[n], "alert %s uses %s, which the exporter does not serve", r.Alert, n)
			used[n] = true
		}
	}
	for _, want := range []string{"TenureReadyJobsWaitingTooLong", "TenureStaleWrites", "TenureLeaseExpiryRising",
		"TenureEmptyClaimsWithReadyWork", "TenureDeadJobsGrowing"} {
		require.True(t, alerts[want], "missing alert %s", want)
	}

	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	var missing []string
	for _, n := range metricNameRE.FindAllString(string(doc), -1) {
		if !served[n] && !strings.HasSuffix(n, "_") {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "docs/operations.md names metrics the exporter does not serve")
}

// TestDashboardUsesServedMetrics parses the Grafana dashboard (dashboard.json, generated from
// the panel table of docs/operations.md) and checks that it has a panel per row of that table,
// that every query is balanced, and that every tenure_* metric it queries is served.
func TestDashboardUsesServedMetrics(t *testing.T) {
	t.Parallel()
	served := servedMetrics(t)
	raw, err := os.ReadFile("dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.Equal(t, "tenure-overview", dash.UID)
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	titles := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		require.False(t, ids[p.ID], "duplicate panel id %d", p.ID)
		ids[p.ID] = true
		titles[p.Title] = true
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.Equal(t, strings.Count(tg.Expr, "("), strings.Count(tg.Expr, ")"), "%s: unbalanced parentheses", p.Title)
			names := metricNameRE.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, names, p.Title)
			for _, n := range names {
				require.True(t, served[n], "panel %q queries %s, which the exporter does not serve", p.Title, n)
			}
		}
	}
	// Every panel row of the operations table has its panel.
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| ") || !strings.Contains(line, "`tenure_") {
			continue
		}
		title := strings.TrimSpace(strings.Split(line, "|")[1])
		if strings.HasPrefix(title, "Panel") {
			continue
		}
		require.True(t, titles[title], "docs/operations.md panel %q has no dashboard panel", title)
	}
}
