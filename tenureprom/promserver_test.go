package tenureprom_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureprom"
	"github.com/tenureq/tenure/worker"
)

type blockArgs struct{}

func (blockArgs) Kind() string        { return "block" }
func (blockArgs) PayloadVersion() int { return 1 }

type doomedArgs struct{}

func (doomedArgs) Kind() string        { return "doomed" }
func (doomedArgs) PayloadVersion() int { return 1 }

// TestPrometheusServerFiresAlerts runs a real Prometheus server (the `prometheus` binary,
// Debian's 2.42 in CI) against a worker serving the engine and cluster collectors, with the
// rules of alerts.yml loaded (their expressions unchanged; only the `for:` durations are
// dropped, so a rule fires on its first true evaluation). It drives a stale write, a ready job
// waiting 10 minutes in a queue no worker serves, and dead jobs growing, then waits until
// Prometheus reports those three alerts firing.
func TestPrometheusServerFiresAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server (-short)")
	}
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus binary not found in PATH: install it (apt-get install prometheus; .ci/run does) to run this test")
	}
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()

	// The worker: "block" jobs wait for the test, "doomed" jobs fail permanently.
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	running := make(chan int64, 1)
	w, err := worker.New(pool, &worker.Config{
		ID:     "prom-it",
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: 2}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FetchPollMin: 10 * time.Millisecond,
		FetchPollMax: 200 * time.Millisecond, ReclaimEvery: 200 * time.Millisecond, RegistryEvery: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[blockArgs]) error {
		running <- j.ID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil)
	worker.MustRegister(w, func(context.Context, *generics.Job[doomedArgs]) error {
		return worker.Permanent(errors.New("doomed"))
	}, &worker.HandlerOptions{MaxAttempts: 1})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})

	reg := prometheus.NewRegistry()
	reg.MustRegister(tenureprom.NewEngineCollector(w))
	cluster, err := tenureprom.NewClusterCollector(pool, nil)
	require.NoError(t, err)
	reg.MustRegister(cluster)
	target := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(target.Close)

	prom := startPrometheus(t, bin, strings.TrimPrefix(target.URL, "http://"))

	// Prometheus scrapes the worker before anything happens: the counters' zero is a sample.
	prom.waitFor(t, 30*time.Second, `up{job="tenure"} == 1 and on() tenure_stale_writes_total == 0`)

	client, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	// 1. A stale write: while the handler runs, the job's claim token changes (as when its
	// lease expired and another worker took it); the handler's finish then changes nothing.
	_, err = client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	var id int64
	select {
	case id = <-running:
	case <-time.After(20 * time.Second):
		t.Fatal("the block job was not claimed")
	}
	tag, err := pool.Exec(ctx, `UPDATE tenure.jobs SET claim_token = gen_random_uuid() WHERE id = $1 AND state = 'running'`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	once.Do(func() { close(release) })

	// 2. A ready job due 10 minutes ago in a queue no worker serves.
	_, err = client.Insert(ctx, okArgs{}, &jobs.InsertOpts{Queue: "paused", RunAt: time.Now().Add(-10 * time.Minute)})
	require.NoError(t, err)

	// 3. Dead jobs growing: one dead job, seen by Prometheus, then another.
	_, err = client.Insert(ctx, doomedArgs{}, nil)
	require.NoError(t, err)
	prom.waitFor(t, 30*time.Second, `tenure_queue_jobs{state="dead",kind="doomed"} == 1`)
	_, err = client.Insert(ctx, doomedArgs{}, nil)
	require.NoError(t, err)

	want := map[string]map[string]string{
		"TenureStaleWrites":             {},
		"TenureReadyJobsWaitingTooLong": {"queue": "paused", "priority": "2"},
		"TenureDeadJobsGrowing":         {"queue": "default", "kind": "doomed"},
	}
	start := time.Now()
	var firing map[string]promAlert
	for deadline := start.Add(60 * time.Second); ; {
		firing = prom.firingAlerts(t)
		missing := 0
		for name, labels := range want {
			a, ok := firing[name]
			if !ok {
				missing++
				continue
			}
			for k, v := range labels {
				require.Equal(t, v, a.Labels[k], "%s: label %s", name, k)
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts firing after 60s: %v; want %v\nprometheus log:\n%s", names(firing), want, prom.log())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("alerts firing %.1fs after the last scenario step: %v", time.Since(start).Seconds(), names(firing))
	require.Equal(t, "warning", firing["TenureStaleWrites"].Labels["severity"])
	require.Contains(t, firing["TenureStaleWrites"].Annotations["summary"], "stale writes rejected")

	// An engine metric through the query API, with the labels Prometheus attached.
	res := prom.query(t, `tenure_jobs_completed_total{outcome="dead",kind="doomed"}`)
	require.Len(t, res, 1, "%+v", res)
	require.Equal(t, "tenure", res[0].Metric["job"])
	require.Equal(t, strings.TrimPrefix(target.URL, "http://"), res[0].Metric["instance"])
	require.Equal(t, "2", res[0].Value[1])
	res = prom.query(t, `tenure_stale_writes_total`)
	require.Len(t, res, 1)
	require.Equal(t, "1", res[0].Value[1])
}

// promServer is a running prometheus process.
type promServer struct {
	base string
	mu   sync.Mutex
	out  *bytes.Buffer
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (p *promServer) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.out.String()
	if len(s) > 8000 {
		s = "...\n" + s[len(s)-8000:]
	}
	return s
}

// startPrometheus writes a configuration scraping target every second with a test copy of
// alerts.yml, starts bin on a free local port and waits until it is ready. It is killed at
// cleanup.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules := filepath.Join(dir, "alerts.yml")
	require.NoError(t, os.WriteFile(rules, testRules(t), 0o644))
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: tenure
    static_configs:
      - targets: [%q]
`, rules, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	p := &promServer{base: "http://" + addr, out: &bytes.Buffer{}}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout = lockedWriter{&p.mu, p.out}
	cmd.Stderr = lockedWriter{&p.mu, p.out}
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case err := <-exited:
			t.Fatalf("prometheus exited: %v\n%s", err, p.log())
		default:
		}
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30s: %v\n%s", err, p.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testRules returns alerts.yml with every rule's `for:` removed; the expressions, labels and
// annotations are kept as they are (checked against the original).
func testRules(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile("alerts.yml")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	groups, ok := doc["groups"].([]any)
	require.True(t, ok)
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			delete(r.(map[string]any), "for")
		}
	}
	out, err := yaml.Marshal(doc)
	require.NoError(t, err)

	var orig, test ruleFile
	require.NoError(t, yaml.Unmarshal(raw, &orig))
	require.NoError(t, yaml.Unmarshal(out, &test))
	require.Len(t, test.Groups[0].Rules, len(orig.Groups[0].Rules))
	for i, r := range orig.Groups[0].Rules {
		require.Equal(t, r.Alert, test.Groups[0].Rules[i].Alert)
		require.Equal(t, r.Expr, test.Groups[0].Rules[i].Expr)
		require.Empty(t, test.Groups[0].Rules[i].For)
	}
	return out
}

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (p *promServer) get(t *testing.T, path string, data any) {
	t.Helper()
	resp, err := http.Get(p.base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &env), string(body))
	require.Equal(t, "success", env.Status, "%s: %s", path, env.Error)
	require.NoError(t, json.Unmarshal(env.Data, data), string(env.Data))
}

// firingAlerts returns the firing alerts by name.
func (p *promServer) firingAlerts(t *testing.T) map[string]promAlert {
	t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.get(t, "/api/v1/alerts", &data)
	out := map[string]promAlert{}
	for _, a := range data.Alerts {
		if a.State == "firing" {
			out[a.Labels["alertname"]] = a
		}
	}
	return out
}

// query runs an instant query and returns its vector; values are [time, "value"].
func (p *promServer) query(t *testing.T, q string) []promSample {
	t.Helper()
	var data struct {
		ResultType string       `json:"resultType"`
		Result     []promSample `json:"result"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(q), &data)
	require.Equal(t, "vector", data.ResultType)
	return data.Result
}

// waitFor polls an instant query until it returns a non-empty vector.
func (p *promServer) waitFor(t *testing.T, timeout time.Duration, q string) {
	t.Helper()
	for deadline := time.Now().Add(timeout); len(p.query(t, q)) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still empty after %v\nprometheus log:\n%s", q, timeout, p.log())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func names(m map[string]promAlert) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
