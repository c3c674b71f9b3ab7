package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"github.com/tenureq/tenure/tenureprom"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// syncBuffer collects the program's output; it is printed when a test fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testConfig(t *testing.T) (config, *syncBuffer) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	out := &syncBuffer{}
	cfg := defaultConfig()
	cfg.URL = pgtest.AdminURL(t)
	cfg.DB = "tenure_shop_test_" + hex.EncodeToString(b[:])
	cfg.DropDB = true
	cfg.Out, cfg.Log = out, io.Discard
	cfg.MaxRun = 2 * time.Minute
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("program output:\n%s", out)
		}
	})
	return cfg, out
}

// TestShop runs the example end to end on a small number of orders: every job succeeds, the
// slow reports outlive their lease thanks to heartbeats, legacy receipts are upgraded and
// every charge is applied exactly once.
func TestShop(t *testing.T) {
	t.Parallel()
	cfg, out := testConfig(t)
	cfg.Orders, cfg.ReportEvery, cfg.ReportWork = 120, 40, 2500*time.Millisecond
	sum, err := run(context.Background(), cfg)
	require.NoError(t, err)
	require.Empty(t, sum.problems())
	require.Empty(t, sum.Interrupted)
	require.EqualValues(t, 120, sum.Placed)
	require.EqualValues(t, 120*3+3+sum.SummaryJobs, sum.States.total)
	require.GreaterOrEqual(t, sum.SummaryJobs, int64(2), "one at start, then one every 2 s")
	require.Equal(t, sum.SummaryJobs, sum.SummaryTicks, "one job per tick")
	require.Equal(t, sum.SummaryJobs-sum.SummaryPending, sum.Summaries)
	require.EqualValues(t, sum.States.total-sum.SummaryPending, sum.States.succeeded)
	require.True(t, sum.exactlyOnce())
	require.EqualValues(t, 120, sum.ChargesApplied)

	require.GreaterOrEqual(t, sum.Reports, 3) // more only if a report lost its lease and ran again
	require.Equal(t, 2*time.Second, sum.ReportLease)
	require.Greater(t, sum.ReportShortest, sum.ReportLease, "a report must outlive its lease")
	require.Positive(t, sum.Worker.Heartbeats)
	require.Positive(t, sum.Worker.HeartbeatRows)
	// A 2 s lease is demo-sized (production leases are >= 30 s): on a badly overloaded
	// machine a claim or heartbeat can arrive after it ran out. The job is then reclaimed and
	// retried, and everything above must still hold; only report it.
	if ws := sum.Worker; ws.LeasesLost+ws.Reclaimed+ws.StaleRejected > 0 {
		t.Logf("lease events under load: lost %d, reclaimed %d, stale rejected %d", ws.LeasesLost, ws.Reclaimed, ws.StaleRejected)
	}

	require.EqualValues(t, 2, sum.LegacyReceipts)
	require.EqualValues(t, 12, sum.CheckoutRetries)
	require.EqualValues(t, 12, sum.ReceiptDuplicates, "a checkout retry must get the existing receipt job back")
	require.EqualValues(t, 120, sum.ReceiptJobs)
	require.Positive(t, sum.Worker.Retried)
	require.Contains(t, out.String(), "OK: charges applied 120 = ledger rows 120 = orders paid 120")
}

// TestShopExactlyOnceUnderFailures injects many lost payment responses and crashes after the
// charge: the payment service sees repeated requests, the ledger serves retried attempts,
// and still every order is charged once.
func TestShopExactlyOnceUnderFailures(t *testing.T) {
	t.Parallel()
	cfg, _ := testConfig(t)
	cfg.Orders, cfg.ReportEvery = 60, 1000
	cfg.LostRate, cfg.CrashRate, cfg.MailFailRate = 0.3, 0.3, 0.3
	sum, err := run(context.Background(), cfg)
	require.NoError(t, err)
	require.Empty(t, sum.problems())
	require.True(t, sum.exactlyOnce())
	require.EqualValues(t, 60, sum.ChargesApplied)
	require.Positive(t, sum.LostResponses)
	require.Positive(t, sum.PaymentReplayed)
	require.Positive(t, sum.LedgerReplays)
	require.Greater(t, sum.PaymentRequests, sum.ChargesApplied)
	require.Zero(t, sum.Reports)
}

// TestShopInterrupted cancels the run (as SIGINT does) while orders are still being placed:
// the worker stops gracefully, no job is left running, and nothing was charged twice.
func TestShopInterrupted(t *testing.T) {
	t.Parallel()
	cfg, out := testConfig(t)
	cfg.Orders, cfg.ReportEvery, cfg.ReportWork = 100000, 10, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Interrupt once some orders are in.
		for ctx.Err() == nil && !bytes.Contains([]byte(out.String()), []byte("[   1s]")) {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	sum, err := run(ctx, cfg)
	cancel()
	require.NoError(t, err)
	require.Equal(t, "signal", sum.Interrupted)
	require.Empty(t, sum.problems())
	require.Less(t, sum.Placed, int64(cfg.Orders))
	require.Positive(t, sum.Placed)
	// A graceful stop leaves no job running (a claim in flight at Stop is still dispatched,
	// and jobs of handlers that ignore cancellation are released).
	require.Zero(t, sum.States.running)
	require.LessOrEqual(t, sum.LedgerRows, sum.ChargesApplied)
	require.Contains(t, out.String(), "stopping (signal)")
}

// poller GETs a URL the demo serves, again and again while the demo runs, handing every
// answer to see until see returns true or stop is closed.
type poller struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func newPoller() *poller { return &poller{stop: make(chan struct{})} }

func (p *poller) poll(url string, every time.Duration, see func(code int, body string) bool) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			if resp, err := http.Get(url); err == nil {
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if see(resp.StatusCode, string(body)) {
					return
				}
			}
			select {
			case <-p.stop:
				return
			case <-time.After(every):
			}
		}
	}()
}

func (p *poller) close() {
	close(p.stop)
	p.wg.Wait()
}

// TestShopServesMetrics runs the demo with -metrics-addr and scrapes it while it runs: the
// engine and cluster metrics are served. Each wanted series must appear in some scrape taken
// while the demo runs (the last scrape can race the graceful stop, which removes the worker's
// registry row, so no single scrape is required to hold them all).
func TestShopServesMetrics(t *testing.T) {
	t.Parallel()
	cfg, _ := testConfig(t)
	cfg.Orders, cfg.ReportEvery = 400, 1000 // the worker (and its registry row) lives for the run: long enough for several scrapes
	cfg.MetricsAddr = "127.0.0.1:0"
	// Every scrape refreshes the cluster snapshot: by default a snapshot may be served for 10×
	// its refresh time, which on a loaded machine outlasts this short run (the first scrape,
	// taken before the worker registered, would be served throughout).
	cfg.clusterMetrics = &tenureprom.ClusterConfig{MaxAge: -1, Wait: -1}
	wants := []string{`tenure_jobs_completed_total{kind="shop.charge_card",outcome="succeeded",queue="shop"}`,
		`tenure_claims_total `, `tenure_job_wait_seconds_bucket{`, `tenure_registered_workers{expired="false"} 1`}
	var mu sync.Mutex
	seen := map[string]bool{}
	scrapes := 0
	p := newPoller()
	cfg.onMetrics = func(url string) {
		p.poll(url, 50*time.Millisecond, func(code int, body string) bool {
			if code != http.StatusOK {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			scrapes++
			for _, w := range wants {
				if strings.Contains(body, w) {
					seen[w] = true
				}
			}
			return false
		})
	}
	sum, err := run(context.Background(), cfg)
	p.close()
	require.NoError(t, err)
	require.Empty(t, sum.problems())
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, scrapes)
	for _, want := range wants {
		require.True(t, seen[want], "no scrape in %d held %s", scrapes, want)
	}
}

// TestShopServesDashboard runs the demo with -ui-addr and loads the dashboard while it runs:
// the overview lists the shop queue and the worker. The overview is a snapshot shared by
// viewers and refreshed every few seconds: poll until it shows the worker (registered once the
// run has started).
func TestShopServesDashboard(t *testing.T) {
	t.Parallel()
	cfg, _ := testConfig(t)
	cfg.Orders, cfg.ReportEvery = 400, 1000
	cfg.UIAddr = "127.0.0.1:0"
	cfg.uiRefresh = time.Second // the shortest refresh; the run outlasts it
	var mu sync.Mutex
	var page string
	var code int
	p := newPoller()
	cfg.onUI = func(url string) {
		p.poll(url, 200*time.Millisecond, func(c int, body string) bool {
			mu.Lock()
			defer mu.Unlock()
			code, page = c, body
			return strings.Contains(page, `data-worker="`)
		})
	}
	sum, err := run(context.Background(), cfg)
	p.close()
	require.NoError(t, err)
	require.Empty(t, sum.problems())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `data-worker="`)
	require.Contains(t, page, "read-only")
}
