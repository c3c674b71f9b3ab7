package tenureui_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureui"
	"github.com/tenureq/tenure/worker"
)

// findBrowser returns a Chromium or Chrome binary ($TENUREUI_BROWSER first), or "".
func findBrowser() string {
	if p := os.Getenv("TENUREUI_BROWSER"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Flaky fails while the remote it calls is broken (healed is false).
type Flaky struct {
	Order int    `json:"order"`
	Note  string `json:"note"`
}

func (Flaky) Kind() string        { return "flaky" }
func (Flaky) PayloadVersion() int { return 1 }

// Noop succeeds.
type Noop struct {
	N int `json:"n"`
}

func (Noop) Kind() string        { return "noop" }
func (Noop) PayloadVersion() int { return 1 }

// Mail records that it ran.
type Mail struct {
	To string `json:"to"`
}

func (Mail) Kind() string        { return "mail" }
func (Mail) PayloadVersion() int { return 1 }

// Hostile carries markup in its args.
type Hostile struct {
	Text string `json:"text"`
}

func (Hostile) Kind() string        { return "hostile" }
func (Hostile) PayloadVersion() int { return 1 }

// Steps reports its progress one step at a time (fixture.step advances it).
type Steps struct {
	N int64 `json:"n"`
}

func (Steps) Kind() string        { return "steps" }
func (Steps) PayloadVersion() int { return 1 }

type fixture struct {
	step   chan struct{} // each receive lets a Steps job do one more step
	pool   *pgxpool.Pool
	client *jobs.Client
	w      *worker.Worker
	base   string // the dashboard, under /ui
	healed atomic.Bool
	mails  atomic.Int64
}

// newFixture starts a real worker (queues default and mail) and the dashboard, actions
// enabled, every action by "browser-test".
func newFixture(t *testing.T, refresh time.Duration) *fixture {
	t.Helper()
	f := &fixture{pool: pgtest.NewPool(t), step: make(chan struct{})}
	w, err := worker.New(f.pool, &worker.Config{
		Queues:          map[string]worker.QueueConfig{"default": {Concurrency: 4}, "mail": {Concurrency: 2}},
		QueueStateEvery: 100 * time.Millisecond, RegistryEvery: 200 * time.Millisecond,
		FetchPollMax: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Flaky]) error {
		if !f.healed.Load() {
			return fmt.Errorf("payment gateway answered 502 for order %d", job.Args.Order)
		}
		return nil
	}, &worker.HandlerOptions{MaxAttempts: 1})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Noop]) error { return nil }, nil)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Steps]) error {
		for i := int64(1); i <= job.Args.N; i++ {
			select {
			case <-f.step:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if err := worker.Progress(ctx, i, job.Args.N, fmt.Sprintf("step %d", i)); err != nil {
				return err
			}
		}
		return worker.SetOutput(ctx, map[string]int64{"steps": job.Args.N})
	}, &worker.HandlerOptions{Timeout: 10 * time.Minute})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Mail]) error { f.mails.Add(1); return nil },
		&worker.HandlerOptions{Queue: "mail"})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Hostile]) error {
		return worker.Permanent(errors.New(job.Args.Text))
	}, &worker.HandlerOptions{Queue: "mail", MaxAttempts: 1})
	f.w = w
	f.client, err = jobs.NewClient(f.pool, &jobs.Config{Registry: w.Registry()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		cancel()
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = w.Stop(sctx)
	})
	h, err := tenureui.New(f.pool, &tenureui.Config{Prefix: "/ui", Client: f.client, EnableActions: true, RefreshEvery: refresh,
		Authorizer: func(*http.Request, tenureui.Action) (string, error) { return "browser-test", nil }})
	require.NoError(t, err)
	f.base = uiServer(t, h) + "/ui"
	return f
}

func (f *fixture) waitState(t *testing.T, id int64, want generics.JobState) *generics.JobRow {
	t.Helper()
	var row *generics.JobRow
	require.Eventually(t, func() bool {
		var err error
		row, err = f.client.Get(context.Background(), id)
		require.NoError(t, err)
		return row.State == want
	}, 20*time.Second, 20*time.Millisecond, "job %d never became %s", id, want)
	return row
}

// browser is one Chromium process shared by the subtests of TestBrowser, each in its own tab.
type browser struct {
	ctx context.Context
	mu  sync.Mutex
	log []string
}

// tab opens a tab that records console errors, exceptions and CSP reports into b.log.
func (b *browser) tab(t *testing.T) context.Context {
	t.Helper()
	// A browser context of its own: the subtests' servers all live on 127.0.0.1, and cookies
	// are not per port.
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelT)
	msgs := chromedp.Console(ctx)
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1360, 900)))
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException || m.Type == "error" || strings.Contains(m.Text, "Content Security Policy") {
				b.mu.Lock()
				b.log = append(b.log, t.Name()+": "+string(m.Type)+": "+m.Text)
				b.mu.Unlock()
			}
		}
	}()
	return ctx
}

func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.log...)
}

// screenshot captures the page as name.png: into docs/img (the README's pictures) when
// TENURE_SCREENSHOTS=1, else into the test's temporary directory, so that an ordinary test
// run does not rewrite tracked files.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.Greater(t, len(png), 1000, "an empty screenshot")
	dir := t.TempDir()
	if os.Getenv("TENURE_SCREENSHOTS") == "1" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "docs", "img")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// outcome returns the action's message, failing the test with the error page's text.
func outcome(t *testing.T, ctx context.Context) string {
	t.Helper()
	msg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById('message') || {}).textContent || ''`))
	require.NoError(t, err)
	if msg == "" {
		t.Fatalf("the action failed: %s", text(t, ctx, "main"))
	}
	return msg
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return s
}

// TestBrowser drives the dashboard in a real Chromium against real PostgreSQL and real
// workers. It skips only when no browser binary exists.
func TestBrowser(t *testing.T) {
	exe := findBrowser()
	if exe == "" {
		t.Skip("no Chromium/Chrome binary found (apt-get install chromium, or set TENUREUI_BROWSER): the browser tests skip")
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true))...)
	bctx, cancelB := chromedp.NewContext(alloc)
	b := &browser{ctx: bctx}
	// Cleanup, not defer: the parallel subtests run after this function returns.
	t.Cleanup(func() {
		cancelB()
		cancelAlloc()
		require.Empty(t, b.problems(), "the pages logged errors or CSP violations")
	})
	start := time.Now()
	require.NoError(t, chromedp.Do(bctx), "starting %s", exe)
	t.Logf("browser %s started in %v", exe, time.Since(start).Round(time.Millisecond))

	t.Run("ReinjectDeadJob", func(t *testing.T) { t.Parallel(); testReinjectDeadJob(t, b) })
	t.Run("PauseQueue", func(t *testing.T) { t.Parallel(); testPauseQueue(t, b) })
	t.Run("HostilePayloads", func(t *testing.T) { t.Parallel(); testHostilePayloads(t, b) })
	t.Run("WorkflowView", func(t *testing.T) { t.Parallel(); testWorkflowView(t, b) })
	t.Run("ProgressAdvances", func(t *testing.T) { t.Parallel(); testProgressAdvances(t, b) })
}

// testReinjectDeadJob: open the overview, find the dead job by filter, re-inject it with a
// reason, see it succeed and the audit entry appear. It also writes the screenshots.
func testReinjectDeadJob(t *testing.T, b *browser) {
	f := newFixture(t, time.Second)
	ctx := context.Background()
	// Some real traffic for the overview: noop jobs in two priority bands, scheduled ones,
	// mail jobs, and the flaky job, which dies (MaxAttempts 1).
	var batch []jobs.InsertManyParams
	for i := range 400 {
		batch = append(batch, jobs.InsertManyParams{Args: Noop{N: i}, Opts: &jobs.InsertOpts{Priority: 2 + i%2}})
	}
	for i := range 40 {
		batch = append(batch, jobs.InsertManyParams{Args: Mail{To: fmt.Sprintf("user%d@example.com", i)}})
		batch = append(batch, jobs.InsertManyParams{Args: Noop{N: i}, Opts: &jobs.InsertOpts{Delay: time.Hour, Priority: 1}})
	}
	_, err := f.client.InsertMany(ctx, batch)
	require.NoError(t, err)
	row, err := f.client.Insert(ctx, Flaky{Order: 1042, Note: "gift card"}, &jobs.InsertOpts{Metadata: map[string]string{"request_id": "req-7f3a"}})
	require.NoError(t, err)
	f.waitState(t, row.Job.ID, generics.JobStateDead)
	require.Eventually(t, func() bool {
		n, err := f.client.List(ctx, jobs.ListParams{State: generics.JobStateSucceeded, Limit: 1000})
		require.NoError(t, err)
		return len(n.Jobs) == 440
	}, 20*time.Second, 50*time.Millisecond)

	tab := b.tab(t)
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(f.base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#bands tr[data-band="default/2"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#workers tr[data-worker]`))))
	require.Contains(t, text(t, tab, `#bands tr[data-band="default/2"] td.dead`), "1", "the overview counts the dead job")
	require.Contains(t, text(t, tab, `#workers`), f.w.ID())
	require.Contains(t, text(t, tab, `#deadcodes`), "flaky")
	screenshot(t, tab, "overview")

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(f.base+"/jobs"), chromedp.WaitVisible(chromedp.CSS(`#jobs tbody tr[data-id]`))))
	screenshot(t, tab, "jobs")
	// Find the dead job by filter.
	require.NoError(t, chromedp.Do(tab,
		chromedp.SetValue(chromedp.CSS(`select[name="state"]`), "dead"),
		chromedp.SendKeys(chromedp.CSS(`input[name="kind"]`), "flaky"),
		chromedp.Click(chromedp.CSS(`#apply`))))
	// The unfiltered page lists the dead job too (newest first): wait for the filtered page
	// to have replaced it before counting its rows.
	var n int
	require.Eventually(t, func() bool {
		loc, err := chromedp.Run(tab, chromedp.Location())
		if err != nil || !strings.Contains(loc, "state=dead") {
			return false
		}
		n, err = chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('#jobs tr[data-id]').length`))
		return err == nil && n > 0
	}, 10*time.Second, 50*time.Millisecond, "the filtered page did not load")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#jobs tr[data-id="%d"]`, row.Job.ID)))))
	require.Equal(t, 1, n, "the filter state=dead kind=flaky matches the one dead job")

	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#jobs tr[data-id="%d"] a`, row.Job.ID))),
		chromedp.WaitVisible(chromedp.CSS(`#act-reinject`))))
	require.Equal(t, "dead", text(t, tab, "#state"))
	require.Contains(t, text(t, tab, "#attempts"), "payment gateway answered 502 for order 1042")
	require.Contains(t, text(t, tab, "#metadata"), "req-7f3a")
	screenshot(t, tab, "job")

	// The remote is fixed; re-inject with a reason.
	f.healed.Store(true)
	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys(chromedp.CSS(`#act-reinject input[name="reason"]`), "gateway fixed (INC-4711)"),
		chromedp.Click(chromedp.CSS(`#act-reinject button`)),
		chromedp.WaitVisible(chromedp.CSS(`#message, #error`))))
	require.Contains(t, outcome(t, tab), fmt.Sprintf("Job %d re-injected", row.Job.ID))
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", f.base, row.Job.ID)),
		chromedp.Poll[chromedp.Void](`document.getElementById('state').textContent === 'succeeded'`, chromedp.WithPollingTimeout(20*time.Second))))
	audit := text(t, tab, "#audit")
	require.Contains(t, audit, "browser-test")
	require.Contains(t, audit, "reinject")
	require.Contains(t, audit, "gateway fixed (INC-4711)")
	got := f.waitState(t, row.Job.ID, generics.JobStateSucceeded)
	require.Equal(t, int64(2), got.Generation, "the re-injected attempt is the job's second generation")
	entries, err := f.client.Audit(ctx, row.Job.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "browser-test", entries[0].Actor)
	require.Equal(t, "gateway fixed (INC-4711)", entries[0].Reason)
}

// testPauseQueue: pause a queue from the overview and see the worker stop claiming from it;
// resume it and see the waiting job run, on a job page that updates without a reload.
func testPauseQueue(t *testing.T, b *browser) {
	f := newFixture(t, time.Second)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		qs, err := f.client.ListQueues(ctx)
		require.NoError(t, err)
		return len(qs) == 2
	}, 10*time.Second, 20*time.Millisecond, "the worker's queues are listed")
	tab := b.tab(t)
	// The queues table lists queues with a live worker as of the page's render: on a loaded
	// machine a registry heartbeat can land late, so reload until the mail queue is there.
	require.Eventually(t, func() bool {
		wctx, cancel := context.WithTimeout(tab, 3*time.Second)
		defer cancel()
		return chromedp.Do(wctx, chromedp.Navigate(f.base+"/"),
			chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="mail"] form`))) == nil
	}, 30*time.Second, 100*time.Millisecond, "the overview never listed the mail queue")
	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys(chromedp.CSS(`#queues tr[data-queue="mail"] input[name="reason"]`), "SMTP relay maintenance"),
		chromedp.Click(chromedp.CSS(`#queues tr[data-queue="mail"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#message, #error`))))
	require.Contains(t, outcome(t, tab), "Queue mail: paused (by browser-test)")
	// The worker hears the pause by NOTIFY, at the latest after QueueStateEvery (100 ms).
	time.Sleep(500 * time.Millisecond)
	job, err := f.client.Insert(ctx, Mail{To: "ada@example.com"}, nil)
	require.NoError(t, err)
	noop, err := f.client.Insert(ctx, Noop{N: 1}, nil)
	require.NoError(t, err)
	f.waitState(t, noop.Job.ID, generics.JobStateSucceeded) // the other queue keeps running
	time.Sleep(1500 * time.Millisecond)
	got, err := f.client.Get(ctx, job.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, got.State, "a paused queue's job is not claimed")
	require.Equal(t, 0, got.Attempt)
	require.Zero(t, f.mails.Load())

	// A second tab watches the job; the first resumes the queue.
	watch := b.tab(t)
	require.NoError(t, chromedp.Do(watch, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", f.base, job.Job.ID)), chromedp.WaitVisible(chromedp.CSS("#state"))))
	require.Equal(t, "ready", text(t, watch, "#state"))
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(f.base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#bands tr[data-band="mail/2"] .badge.paused`)),
		chromedp.SendKeys(chromedp.CSS(`#queues tr[data-queue="mail"] input[name="reason"]`), "relay back"),
		chromedp.Click(chromedp.CSS(`#queues tr[data-queue="mail"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#message, #error`))))
	require.Contains(t, outcome(t, tab), "Queue mail: resumed (by browser-test)")
	require.NoError(t, chromedp.Do(watch,
		chromedp.Poll[chromedp.Void](`document.getElementById('state').textContent === 'succeeded'`, chromedp.WithPollingTimeout(15*time.Second))))
	refreshed, err := chromedp.Run(watch, chromedp.Evaluate[bool](`document.getElementById('live').hasAttribute('data-refreshed')`))
	require.NoError(t, err)
	require.True(t, refreshed, "the job page updated itself, without a reload")
	require.Equal(t, int64(1), f.mails.Load())
	entries, err := f.client.Audit(ctx, 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, []string{"pause", "resume"}, []string{entries[0].Action, entries[1].Action})
	require.Equal(t, "SMTP relay maintenance", entries[0].Reason)
}

// Markup an attacker could place in args, metadata, error messages, names and reasons.
const (
	xssScript = `<script>window.__pwned=1</script>`
	xssImg    = `"><img src=x onerror="window.__pwned=2">`
	xssAttr   = `' onmouseover='window.__pwned=3' x='`
)

// testHostilePayloads: markup in args, metadata, error messages, queue and kind names, effect
// names and results and audit reasons is shown as text on every page: no element is injected,
// nothing executes, and the CSP never has to refuse anything.
func testHostilePayloads(t *testing.T, b *browser) {
	f := newFixture(t, time.Second)
	ctx := context.Background()
	hostile := xssScript + xssImg + xssAttr
	row, err := f.client.Insert(ctx, Hostile{Text: hostile}, &jobs.InsertOpts{
		Metadata: map[string]string{xssScript: xssImg, "trace": xssAttr}})
	require.NoError(t, err)
	f.waitState(t, row.Job.ID, generics.JobStateDead) // its handler fails with the markup as the message
	var raw int64
	require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, finished_at, attempts, last_error_code, errors)
		VALUES ($1, $2, jsonb_build_object('html', $3::text), 'dead', now(), 1, 'TIMEOUT',
		        jsonb_build_array(jsonb_build_object('attempt', 1, 'generation', 1, 'code', 'TIMEOUT', 'message', $3::text, 'at', now())))
		RETURNING id`, xssImg, xssScript, hostile).Scan(&raw))
	_, err = f.pool.Exec(ctx, `INSERT INTO tenure.effects (key, job_id, name, generation, result)
		VALUES ('job:' || $1::bigint || ':effect:' || $2::text, $1::bigint, $2::text, 1, jsonb_build_object('r', $3::text))`, raw, xssImg, hostile)
	require.NoError(t, err)
	_, err = f.client.Retry(ctx, raw, jobs.Action{Actor: xssScript, Reason: hostile})
	require.NoError(t, err)

	tab := b.tab(t)
	check := func(url, wantText string) {
		t.Helper()
		// On pages with a live part, check after it was replaced by a poll too.
		require.NoError(t, chromedp.Do(tab, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main")),
			chromedp.Poll[chromedp.Void](`!document.getElementById('live') || document.getElementById('live').hasAttribute('data-refreshed')`,
				chromedp.WithPollingTimeout(10*time.Second))))
		type verdict struct {
			Pwned   bool   `json:"pwned"`
			Imgs    int    `json:"imgs"`
			Scripts int    `json:"scripts"`
			Handler int    `json:"handlers"`
			Text    string `json:"text"`
		}
		v, err := chromedp.Run(tab, chromedp.Evaluate[verdict](`({
			pwned: window.__pwned !== undefined,
			imgs: document.querySelectorAll('img').length,
			scripts: document.querySelectorAll('script').length,
			handlers: document.querySelectorAll('[onerror],[onmouseover]').length,
			text: document.body.innerText})`))
		require.NoError(t, err, url)
		require.False(t, v.Pwned, "%s: injected script ran", url)
		require.Zero(t, v.Imgs, "%s: an <img> was injected", url)
		require.Equal(t, 1, v.Scripts, "%s: only ui.js is a script", url)
		require.Zero(t, v.Handler, "%s: an event-handler attribute was injected", url)
		require.Contains(t, v.Text, wantText, "%s: the markup is shown as text", url)
	}
	check(f.base+"/", xssImg)        // queue name, dead codes
	check(f.base+"/jobs", xssScript) // args, kinds
	check(f.base+"/jobs?q="+strings.ReplaceAll(xssScript, "<", "%3C"), "window.__pwned=1")
	check(fmt.Sprintf("%s/jobs/%d", f.base, row.Job.ID), xssImg) // args, metadata, error message
	check(fmt.Sprintf("%s/jobs/%d", f.base, raw), xssAttr)       // effects, audit reason and actor
	check(fmt.Sprintf("%s/jobs?queue=%s", f.base, "%22%3E%3Cimg"), "Filter")
}

// testProgressAdvances: a job's page shows its progress advance, without a reload.
func testProgressAdvances(t *testing.T, b *browser) {
	f := newFixture(t, time.Second)
	ctx := context.Background()
	row, err := f.client.Insert(ctx, Steps{N: 3}, nil)
	require.NoError(t, err)
	f.step <- struct{}{}
	tab := b.tab(t)
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", f.base, row.Job.ID)),
		chromedp.Poll[chromedp.Void](`(document.getElementById('progress-text') || {}).textContent?.startsWith('1 of 3')`,
			chromedp.WithPollingTimeout(20*time.Second))))
	f.step <- struct{}{}
	require.NoError(t, chromedp.Do(tab,
		chromedp.Poll[chromedp.Void](`(document.getElementById('progress-text') || {}).textContent?.startsWith('2 of 3')`,
			chromedp.WithPollingTimeout(20*time.Second))))
	require.Contains(t, text(t, tab, "#timeout"), "10m")
	screenshot(t, tab, "job-progress")
	f.step <- struct{}{}
	require.NoError(t, chromedp.Do(tab,
		chromedp.Poll[chromedp.Void](`document.getElementById('state').textContent === 'succeeded'`, chromedp.WithPollingTimeout(20*time.Second))))
}
