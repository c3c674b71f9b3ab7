package tenureprom

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureprom/internal/promdb"
)

// ErrNilPool is returned by NewClusterCollector when it is given no pool.
var ErrNilPool = errors.New("tenureprom: pool must not be nil")

// Defaults of ClusterConfig.MaxKinds and MaxQueues.
const (
	DefaultMaxKinds  = 100
	DefaultMaxQueues = 100
)

// OtherLabel is the kind or queue label value the cluster collector folds the kinds and
// queues beyond ClusterConfig.MaxKinds and MaxQueues into.
const OtherLabel = "other"

// AdaptiveMaxAge is the default ClusterConfig.MaxAge as a multiple of the last refresh's
// duration: a snapshot whose refresh took 200 ms is served for 2 s.
const AdaptiveMaxAge = 10

// ClusterConfig configures a ClusterCollector. A nil *ClusterConfig, or zero fields, mean the
// documented defaults.
type ClusterConfig struct {
	// Schema is the PostgreSQL schema Tenure lives in (jobs.Config.Schema,
	// migrations.Options.Schema; docs/guide.md, "A schema of your own"): the collector reports
	// that schema's jobs and workers. Default "tenure". An invalid name is refused by
	// NewClusterCollector with a *migrations.InvalidSchemaError (migrations.ErrInvalidSchema).
	// The series carry no schema label: register one collector per schema in separate
	// registries (or scrape targets), not two in one registry.
	Schema string
	// Timeout bounds one scrape's statements. Default 5s. A scrape that fails or times out
	// reports the error to Prometheus (the scrape fails) and counts it in
	// tenure_cluster_scrape_errors_total.
	Timeout time.Duration
	// MaxDeadCodeSeries bounds tenure_queue_dead_jobs_by_code: the series with the most dead
	// jobs are kept and the rest summed into code="OTHER". Default 100.
	MaxDeadCodeSeries int
	// MaxKinds and MaxQueues bound the kind and queue labels of the tenure_queue_* series:
	// kinds and queues are user strings (any SQL INSERT or tenure.enqueue call can make new
	// ones), so at each refresh the kinds (queues) with the most ready, running and dead jobs
	// keep their own label value, at most MaxKinds (MaxQueues) values in all, and the others
	// are folded into kind="other" (queue="other"): their job counts summed, their oldest
	// ready age the oldest of them. A real kind or queue named "other" is summed with them.
	// Defaults DefaultMaxKinds and DefaultMaxQueues (100 each).
	MaxKinds, MaxQueues int
	// MaxAge is how long a snapshot (the result of one run of the statements) is served
	// without running the statements again: whatever the number of scrapers, the database
	// runs them at most once per MaxAge. Default (0): AdaptiveMaxAge times the duration of the
	// refresh that produced the snapshot, so that scrapes, however frequent, keep the database
	// busy with refreshes about 1/AdaptiveMaxAge of the time at most, while a cheap refresh
	// (a small backlog) is reused for a few milliseconds only. Negative: every scrape starts a
	// refresh (unless one is already running).
	MaxAge time.Duration
	// Wait bounds how long a scrape waits for the refresh it started (or found running)
	// before it serves the previous snapshot instead; the refresh goes on in the background
	// and the next scrape serves it. So a scrape takes about Wait at most, however long the
	// statements take, and tenure_cluster_snapshot_age_seconds says how old the served
	// numbers are. The first scrape, with no snapshot yet, always waits for its refresh (at
	// most Timeout). Default 25ms. Negative: always wait for the refresh (every scrape is as
	// fresh as MaxAge allows and takes as long as the statements).
	Wait time.Duration
}

// ClusterCollector exports the database's view of the queues and the worker registry (see
// the package documentation). A refresh runs four statements: the ready and dead jobs counted
// by index-only scans of their partial indexes, the running jobs through theirs (cost grows
// with ready, running and dead index entries, never with succeeded or cancelled jobs), and
// the registry. A scrape serves the latest refresh's snapshot: it starts a refresh when the
// snapshot is older than ClusterConfig.MaxAge and waits for it at most ClusterConfig.Wait
// (docs/operations.md, "Scrape cost").
type ClusterCollector struct {
	pool *pgxpool.Pool
	q    *promdb.Queries
	c    *jobs.Client
	cfg  ClusterConfig

	errs prometheus.Counter

	mu       sync.Mutex
	last     *snapshot     // latest finished refresh; nil before the first
	inflight chan struct{} // closed when the running refresh ends; nil when none runs

	jobs, oldestReady, oldestRunning, leaseExpired, cancelRequested, deadByCode,
	workers, heartbeatAge, lastSuccessAge, workerExpired, workerJobs, scrapeDur, snapshotAge *prometheus.Desc
	unserved *prometheus.Desc
	// workflows and sequences (issue 30): jobs waiting on dependencies, and the oldest's age
	waiting, oldestWaiting *prometheus.Desc
}

// snapshot is the result of one refresh: its metrics, or the error that ended it.
type snapshot struct {
	at      time.Time     // when the refresh started: the numbers are at least this old
	took    time.Duration // how long its statements took
	metrics []prometheus.Metric
	err     error
}

// NewClusterCollector returns a collector running its statements on pool, in the schema
// cfg.Schema.
func NewClusterCollector(pool *pgxpool.Pool, cfg *ClusterConfig) (*ClusterCollector, error) {
	if pool == nil {
		return nil, ErrNilPool
	}
	var c ClusterConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.MaxDeadCodeSeries <= 0 {
		c.MaxDeadCodeSeries = 100
	}
	if c.MaxKinds <= 0 {
		c.MaxKinds = DefaultMaxKinds
	}
	if c.MaxQueues <= 0 {
		c.MaxQueues = DefaultMaxQueues
	}
	if c.Wait == 0 {
		c.Wait = 25 * time.Millisecond
	}
	sch, err := dbschema.New(c.Schema)
	if err != nil {
		return nil, err
	}
	c.Schema = sch.Name()
	client, err := jobs.NewClient(pool, &jobs.Config{Schema: c.Schema})
	if err != nil {
		return nil, err
	}
	qkp := []string{"queue", "kind", "priority"}
	return &ClusterCollector{
		pool: pool, q: promdb.New(sch.Wrap(pool)), c: client, cfg: c,
		errs: prometheus.NewCounter(prometheus.CounterOpts{Name: "tenure_cluster_scrape_errors_total", Help: "Cluster scrapes whose statements failed."}),
		jobs: prometheus.NewDesc("tenure_queue_jobs", "Jobs by queue, kind, priority and state: ready (due), scheduled (ready, due later), running, dead.",
			[]string{"queue", "kind", "priority", "state"}, nil),
		oldestReady:     prometheus.NewDesc("tenure_queue_oldest_ready_age_seconds", "Age of the oldest due ready job (now - run_at on the database clock), by queue, kind and priority.", qkp, nil),
		oldestRunning:   prometheus.NewDesc("tenure_queue_oldest_running_age_seconds", "Age of the oldest running attempt (now - its claim time, database clock), by queue, kind and priority: compare it with the kind's handler timeout.", qkp, nil),
		leaseExpired:    prometheus.NewDesc("tenure_queue_lease_expired_jobs", "Running jobs whose lease already expired and that the sweep has not reclaimed yet.", qkp, nil),
		cancelRequested: prometheus.NewDesc("tenure_queue_cancel_requested_jobs", "Running jobs an operator asked to cancel.", qkp, nil),
		deadByCode:      prometheus.NewDesc("tenure_queue_dead_jobs_by_code", "Dead jobs by queue, kind and last error code.", []string{"queue", "kind", "code"}, nil),
		workers:         prometheus.NewDesc("tenure_registered_workers", "Rows in the worker registry, by whether they expired (killed workers not yet aged out).", []string{"expired"}, nil),
		heartbeatAge:    prometheus.NewDesc("tenure_registered_worker_heartbeat_age_seconds", "Time since the worker last refreshed its registry row (database clock).", []string{"worker"}, nil),
		lastSuccessAge:  prometheus.NewDesc("tenure_registered_worker_last_success_age_seconds", "Time since the worker last confirmed a succeeded job, as of its last registry refresh plus the heartbeat age.", []string{"worker"}, nil),
		workerExpired:   prometheus.NewDesc("tenure_registered_worker_expired", "1 when the worker's registry row expired (the worker is most likely gone).", []string{"worker"}, nil),
		workerJobs:      prometheus.NewDesc("tenure_registered_worker_jobs_total", "Attempts the worker finished since it started, by outcome, as of its last registry refresh.", []string{"worker", "outcome"}, nil),
		scrapeDur:       prometheus.NewDesc("tenure_cluster_scrape_duration_seconds", "How long the cluster collector's statements took, in the refresh whose snapshot this scrape serves.", nil, nil),
		unserved: prometheus.NewDesc("tenure_ready_unserved_jobs", "Ready jobs (due or scheduled) that no live worker can run: no worker in the registry both serves the queue and registers the kind (jobs.Stats.Unserved), by queue and kind.",
			[]string{"queue", "kind"}, nil),
		waiting: prometheus.NewDesc("tenure_queue_waiting_jobs", "Jobs waiting on dependencies (workflow tasks and sequence jobs not released yet: state waiting), by queue and kind.",
			[]string{"queue", "kind"}, nil),
		oldestWaiting: prometheus.NewDesc("tenure_queue_oldest_waiting_age_seconds", "Age of the oldest job waiting on dependencies (now - created_at on the database clock), by queue and kind.",
			[]string{"queue", "kind"}, nil),
		snapshotAge: prometheus.NewDesc("tenure_cluster_snapshot_age_seconds", "Age of the served snapshot: time since its refresh started (see ClusterConfig.MaxAge and Wait).", nil, nil),
	}, nil
}

// Describe sends every metric's descriptor.
func (c *ClusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.jobs, c.oldestReady, c.oldestRunning, c.leaseExpired, c.cancelRequested, c.deadByCode,
		c.workers, c.heartbeatAge, c.lastSuccessAge, c.workerExpired, c.workerJobs, c.scrapeDur, c.snapshotAge, c.unserved, c.waiting, c.oldestWaiting} {
		ch <- d
	}
	c.errs.Describe(ch)
}

// Collect sends the metrics of the current snapshot (see ClusterCollector), refreshing it
// first when it is older than MaxAge. When the latest refresh failed it sends an invalid
// metric, which fails the scrape.
func (c *ClusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.current()
	if s.err != nil {
		ch <- prometheus.NewInvalidMetric(c.jobs, s.err)
	} else {
		for _, m := range s.metrics {
			ch <- m
		}
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeDur, prometheus.GaugeValue, s.took.Seconds())
	ch <- prometheus.MustNewConstMetric(c.snapshotAge, prometheus.GaugeValue, time.Since(s.at).Seconds())
	c.errs.Collect(ch)
}

// current returns the snapshot a scrape serves: the latest one when it is younger than
// MaxAge; else, after starting a refresh (unless one runs), the refresh's result if it ends
// within Wait (or the scrape has nothing else to serve), the previous snapshot if not.
func (c *ClusterCollector) current() *snapshot {
	c.mu.Lock()
	s := c.last
	maxAge := c.cfg.MaxAge
	if maxAge == 0 && s != nil {
		maxAge = AdaptiveMaxAge * s.took
	}
	if s != nil && maxAge > 0 && time.Since(s.at) < maxAge {
		c.mu.Unlock()
		return s
	}
	done := c.inflight
	if done == nil {
		done = make(chan struct{})
		c.inflight = done
		go c.refresh(done)
	}
	c.mu.Unlock()
	if s == nil || c.cfg.Wait < 0 {
		<-done // a refresh ends within Timeout
	} else {
		t := time.NewTimer(c.cfg.Wait)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// refresh runs the statements (bounded by Timeout, whoever waits for them), stores the
// snapshot and closes done.
func (c *ClusterCollector) refresh(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	s := &snapshot{at: time.Now()}
	ch := make(chan prometheus.Metric, 64)
	errc := make(chan error, 1)
	go func() {
		errc <- c.collect(ctx, ch)
		close(ch)
	}()
	for m := range ch {
		s.metrics = append(s.metrics, m)
	}
	if s.err = <-errc; s.err != nil {
		s.metrics = nil
		c.errs.Inc()
	}
	s.took = time.Since(s.at)
	c.mu.Lock()
	c.last, c.inflight = s, nil
	c.mu.Unlock()
	close(done)
}

func (c *ClusterCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	ready, err := c.q.ClusterReady(ctx)
	if err != nil {
		return err
	}
	running, err := c.q.ClusterRunning(ctx)
	if err != nil {
		return err
	}
	dead, err := c.q.ClusterDead(ctx)
	if err != nil {
		return err
	}
	waiting, err := c.q.ClusterWaiting(ctx)
	if err != nil {
		return err
	}
	workers, err := c.c.Workers(ctx)
	if err != nil {
		return err
	}
	unserved, err := c.c.Unserved(ctx)
	if err != nil {
		return err
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	// Kinds and queues are user strings: keep the MaxKinds (MaxQueues) with the most jobs and
	// fold the others into OtherLabel, aggregating every series over the folded values.
	kindJobs, queueJobs := map[string]int64{}, map[string]int64{}
	for _, r := range ready {
		kindJobs[r.Kind] += r.Ready + r.Scheduled
		queueJobs[r.Queue] += r.Ready + r.Scheduled
	}
	for _, r := range running {
		kindJobs[r.Kind] += r.Running
		queueJobs[r.Queue] += r.Running
	}
	for _, r := range dead {
		kindJobs[r.Kind] += r.Jobs
		queueJobs[r.Queue] += r.Jobs
	}
	for _, r := range waiting {
		kindJobs[r.Kind] += r.Waiting
		queueJobs[r.Queue] += r.Waiting
	}
	kindOf, queueOf := capLabel(kindJobs, c.cfg.MaxKinds), capLabel(queueJobs, c.cfg.MaxQueues)
	type qkp struct {
		queue, kind string
		prio        int16
	}
	type readyAgg struct {
		ready, scheduled int64
		oldest           float64
	}
	type runningAgg struct {
		running, leaseExpired, cancelRequested int64
		oldest                                 float64
	}
	readyBy, runningBy := map[qkp]*readyAgg{}, map[qkp]*runningAgg{}
	for _, r := range ready {
		k := qkp{queueOf(r.Queue), kindOf(r.Kind), r.Priority}
		a := readyBy[k]
		if a == nil {
			a = &readyAgg{}
			readyBy[k] = a
		}
		a.ready += r.Ready
		a.scheduled += r.Scheduled
		a.oldest = max(a.oldest, r.OldestReadyAgeS)
	}
	for k, a := range readyBy {
		p := strconv.Itoa(int(k.prio))
		gauge(c.jobs, float64(a.ready), k.queue, k.kind, p, "ready")
		gauge(c.jobs, float64(a.scheduled), k.queue, k.kind, p, "scheduled")
		gauge(c.oldestReady, a.oldest, k.queue, k.kind, p)
	}
	for _, r := range running {
		k := qkp{queueOf(r.Queue), kindOf(r.Kind), r.Priority}
		a := runningBy[k]
		if a == nil {
			a = &runningAgg{}
			runningBy[k] = a
		}
		a.running += r.Running
		a.leaseExpired += r.LeaseExpired
		a.cancelRequested += r.CancelRequested
		a.oldest = max(a.oldest, r.OldestRunningAgeS)
	}
	for k, a := range runningBy {
		p := strconv.Itoa(int(k.prio))
		gauge(c.jobs, float64(a.running), k.queue, k.kind, p, "running")
		gauge(c.leaseExpired, float64(a.leaseExpired), k.queue, k.kind, p)
		gauge(c.cancelRequested, float64(a.cancelRequested), k.queue, k.kind, p)
		gauge(c.oldestRunning, a.oldest, k.queue, k.kind, p)
	}
	// Dead: per priority (all codes), and per code (all priorities), bounded.
	type qkc struct{ queue, kind, code string }
	byPrio, byCode := map[qkp]int64{}, map[qkc]int64{}
	for _, r := range dead {
		q, k := queueOf(r.Queue), kindOf(r.Kind)
		byPrio[qkp{q, k, r.Priority}] += r.Jobs
		byCode[qkc{q, k, r.Code}] += r.Jobs
	}
	for k, n := range byPrio {
		gauge(c.jobs, float64(n), k.queue, k.kind, strconv.Itoa(int(k.prio)), "dead")
	}
	codes := make([]qkc, 0, len(byCode))
	for k := range byCode {
		codes = append(codes, k)
	}
	sort.Slice(codes, func(i, j int) bool {
		if byCode[codes[i]] != byCode[codes[j]] {
			return byCode[codes[i]] > byCode[codes[j]]
		}
		a, b := codes[i], codes[j]
		if a.queue != b.queue {
			return a.queue < b.queue
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		return a.code < b.code
	})
	out := map[qkc]int64{}
	for i, k := range codes {
		if i >= c.cfg.MaxDeadCodeSeries-1 && len(codes) > c.cfg.MaxDeadCodeSeries {
			k.code = "OTHER"
		}
		out[k] += byCode[codes[i]]
	}
	for k, n := range out {
		gauge(c.deadByCode, float64(n), k.queue, k.kind, k.code)
	}
	// Ready jobs no live worker can run, on the capped labels (the jobs are ready, so their
	// kinds and queues were counted above).
	type qk struct{ queue, kind string }
	unservedBy := map[qk]int64{}
	for _, u := range unserved {
		unservedBy[qk{queueOf(u.Queue), kindOf(u.Kind)}] += u.Ready
	}
	for k, n := range unservedBy {
		gauge(c.unserved, float64(n), k.queue, k.kind)
	}
	// Waiting on dependencies: a queue and kind with none has no series (as ready ones).
	type waitAgg struct {
		n      int64
		oldest float64
	}
	waitingBy := map[qk]*waitAgg{}
	for _, r := range waiting {
		k := qk{queueOf(r.Queue), kindOf(r.Kind)}
		a := waitingBy[k]
		if a == nil {
			a = &waitAgg{}
			waitingBy[k] = a
		}
		a.n += r.Waiting
		a.oldest = max(a.oldest, r.OldestWaitingAgeS)
	}
	for k, a := range waitingBy {
		gauge(c.waiting, float64(a.n), k.queue, k.kind)
		gauge(c.oldestWaiting, a.oldest, k.queue, k.kind)
	}
	var live, expired int
	for _, w := range workers {
		exp := 0.0
		if w.Expired {
			exp, expired = 1, expired+1
		} else {
			live++
		}
		gauge(c.heartbeatAge, w.HeartbeatAge.Seconds(), w.ID)
		gauge(c.workerExpired, exp, w.ID)
		if w.LastSuccessAt != nil {
			gauge(c.lastSuccessAge, (w.HeartbeatAt.Sub(*w.LastSuccessAt) + w.HeartbeatAge).Seconds(), w.ID)
		}
		for _, o := range []string{"succeeded", "retried", "dead", "cancelled", "released"} {
			ch <- prometheus.MustNewConstMetric(c.workerJobs, prometheus.CounterValue, float64(w.Counters[o]), w.ID, o)
		}
		ch <- prometheus.MustNewConstMetric(c.workerJobs, prometheus.CounterValue, float64(w.Counters["stale_rejected"]), w.ID, "stale")
	}
	gauge(c.workers, float64(live), "false")
	gauge(c.workers, float64(expired), "true")
	return nil
}

// capLabel returns the label value of each of the values counted in jobs: the value itself for
// the max-1 with the most jobs (ties by name), all of them when there are at most max, and
// OtherLabel for the rest; so at most max label values, OtherLabel included.
func capLabel(jobs map[string]int64, max int) func(string) string {
	if len(jobs) <= max {
		return func(v string) string { return v }
	}
	vals := make([]string, 0, len(jobs))
	for v := range jobs {
		vals = append(vals, v)
	}
	sort.Slice(vals, func(i, j int) bool {
		if jobs[vals[i]] != jobs[vals[j]] {
			return jobs[vals[i]] > jobs[vals[j]]
		}
		return vals[i] < vals[j]
	})
	keep := make(map[string]bool, max-1)
	for _, v := range vals[:max-1] {
		keep[v] = true
	}
	return func(v string) string {
		if keep[v] {
			return v
		}
		return OtherLabel
	}
}
