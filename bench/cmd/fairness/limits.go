package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// The flow-control proof benchmarks of issue 16 (-limits):
//
//  1. global: 4 worker processes × 10 slots on one kind of 50 ms jobs, from a pre-inserted
//     backlog, without a limit, with Limit{MaxRunning: 40} (not binding by slots: the cost of
//     enforcing it), 80 (a diagnostic, see defaultGlobalModes) and 25 (binding), interleaved
//     over -limits-rounds rounds (-limits-global chooses the modes). Reported: jobs completed per second in the measured interval, and the most jobs
//     of the kind ever running at once, (a) from the table, sampled every 10 ms (running with
//     an unexpired lease), and (b) from the handlers: every handler reports its start and end
//     (wall clock of the one machine, shared by the processes), and the parent computes the
//     exact maximum overlap of those intervals, at every instant, not only at samples.
//  2. perkey: Limit{PerKey: true, MaxRunning: 1} over 5 keys, 4 worker processes, 2 s leases;
//     the parent SIGKILLs a random child every 2-4 s and starts a replacement. The table is
//     sampled every 10 ms (per key, running jobs with an unexpired lease: never 2), handler
//     intervals per key likewise (a killed child's handlers end at the kill), and every job
//     must end succeeded.
//  3. rate: Limit{Rate: R, Per: 1 s}, 2 worker processes × 50 slots, producers offering 5·R
//     jobs/s; each start's claim time (database clock, generics.JobRow.AttemptedAt) is counted in
//     its window [k s, (k+1) s): every full window of the offering period ≤ R, and the mean
//     within 5 % of R.
//
// Each run uses a fresh database. The children are this command re-executed with
// limitsChildEnv set to a JSON childSpec; they print one line per handler start and end.

const limitsChildEnv = "TENURE_FAIRNESS_LIMITS_CHILD"

type globalJob struct {
	N int `json:"n"`
}

func (globalJob) Kind() string        { return "lim.global" }
func (globalJob) PayloadVersion() int { return 1 }

type keyedJob struct {
	N int `json:"n"`
}

func (keyedJob) Kind() string        { return "lim.keyed" }
func (keyedJob) PayloadVersion() int { return 1 }

type rateJob struct {
	N int `json:"n"`
}

func (rateJob) Kind() string        { return "lim.rate" }
func (rateJob) PayloadVersion() int { return 1 }

// childSpec is what a child worker process runs.
type childSpec struct {
	DB          string         `json:"db"`
	ID          string         `json:"id"`
	Kind        string         `json:"kind"`
	Concurrency int            `json:"concurrency"`
	Handler     time.Duration  `json:"handler"`
	Limits      []worker.Limit `json:"limits"`
}

// limitsChild is the child role: one worker with its own pool, until SIGTERM.
func limitsChild(raw string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The parent holds our stdin open: EOF means it is gone, so do not outlive it.
	ctx, orphaned := context.WithCancel(ctx)
	defer orphaned()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		orphaned()
	}()
	cfg, err := pgxpool.ParseConfig(spec.DB)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	defer pool.Close()
	w, err := worker.New(pool, &worker.Config{
		ID:     spec.ID,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: spec.Concurrency, Limits: spec.Limits}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	var mu sync.Mutex // one write per line, so a SIGKILL loses whole lines only
	emit := func(line string) {
		mu.Lock()
		_, _ = os.Stdout.WriteString(line)
		mu.Unlock()
	}
	handle := func(meta *generics.JobRow) {
		key := meta.Metadata[jobs.ConcurrencyKeyMetadata]
		if key == "" {
			key = "-"
		}
		emit(fmt.Sprintf("S %d %d %s %d %d\n", meta.ID, meta.Attempt, key, time.Now().UnixNano(), meta.AttemptedAt.UnixNano()))
		time.Sleep(spec.Handler)
		emit(fmt.Sprintf("E %d %d %s %d\n", meta.ID, meta.Attempt, key, time.Now().UnixNano()))
	}
	switch spec.Kind {
	case globalJob{}.Kind():
		worker.MustRegister(w, func(ctx context.Context, j *generics.Job[globalJob]) error { handle(j.JobRow); return nil }, nil)
	case keyedJob{}.Kind():
		worker.MustRegister(w, func(ctx context.Context, j *generics.Job[keyedJob]) error { handle(j.JobRow); return nil }, nil)
	case rateJob{}.Kind():
		worker.MustRegister(w, func(ctx context.Context, j *generics.Job[rateJob]) error { handle(j.JobRow); return nil }, nil)
	default:
		fmt.Fprintln(os.Stderr, "child: unknown kind", spec.Kind)
		return 2
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	emit("READY\n")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.Stop(stopCtx)
	return 0
}

// handlerEvent is one line of a child: a handler's start or end.
type handlerEvent struct {
	start   bool
	id      int64
	attempt int
	key     string
	at      int64 // wall clock, ns since the epoch
	claimed int64 // start only: ClaimedAt on the database clock
}

type child struct {
	idx    int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{}
	done   chan struct{}
	killed int64 // ns, when SIGKILLed (0: not)
}

// fleet is the parent's side of the children of one run.
type fleet struct {
	spec     childSpec
	mu       sync.Mutex
	events   []handlerEvent
	perChild map[int][]int // event indexes by child
	children []*child
	next     int
}

func (f *fleet) start() (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	idx := f.next
	f.next++
	f.mu.Unlock()
	spec := f.spec
	spec.ID = fmt.Sprintf("limits-child-%d", idx)
	raw, _ := json.Marshal(spec)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), limitsChildEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe() // kept open while we live (see limitsChild)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{idx: idx, cmd: cmd, stdin: in, ready: make(chan struct{}), done: make(chan struct{})}
	f.mu.Lock()
	f.children = append(f.children, c)
	f.mu.Unlock()
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		readied := false
		for sc.Scan() {
			line := sc.Text()
			if line == "READY" {
				if !readied {
					close(c.ready)
					readied = true
				}
				continue
			}
			ev, ok := parseEvent(line)
			if !ok {
				continue
			}
			f.mu.Lock()
			f.events = append(f.events, ev)
			f.perChild[idx] = append(f.perChild[idx], len(f.events)-1)
			f.mu.Unlock()
		}
		_ = cmd.Wait()
		if !readied {
			close(c.ready)
		}
	}()
	return c, nil
}

func parseEvent(line string) (handlerEvent, bool) {
	p := strings.Fields(line)
	if len(p) < 5 || (p[0] != "S" && p[0] != "E") {
		return handlerEvent{}, false
	}
	id, err1 := strconv.ParseInt(p[1], 10, 64)
	att, err2 := strconv.Atoi(p[2])
	at, err3 := strconv.ParseInt(p[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return handlerEvent{}, false
	}
	ev := handlerEvent{start: p[0] == "S", id: id, attempt: att, key: p[3], at: at}
	if ev.start {
		if len(p) < 6 {
			return handlerEvent{}, false
		}
		c, err := strconv.ParseInt(p[5], 10, 64)
		if err != nil {
			return handlerEvent{}, false
		}
		ev.claimed = c
	}
	return ev, true
}

func (f *fleet) kill(c *child) {
	c.killed = time.Now().UnixNano()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop ends every live child gracefully (SIGTERM), killing those that take over 10 s.
func (f *fleet) stop() {
	f.mu.Lock()
	cs := append([]*child(nil), f.children...)
	f.mu.Unlock()
	for _, c := range cs {
		if c.killed == 0 {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, c := range cs {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Signal(syscall.SIGKILL)
			<-c.done
		}
	}
}

// intervals pairs starts and ends per (child, job, attempt); a start without an end ends at the
// child's kill (or at end, if the child was not killed: still running when the run ended).
type interval struct {
	key        string
	start, end int64
	ended      bool
}

func (f *fleet) intervals(end int64) []interval {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []interval
	for _, c := range f.children {
		open := map[[2]int64]int{}
		for _, i := range f.perChild[c.idx] {
			ev := f.events[i]
			k := [2]int64{ev.id, int64(ev.attempt)}
			if ev.start {
				open[k] = len(out)
				out = append(out, interval{key: ev.key, start: ev.at, end: -1})
			} else if j, ok := open[k]; ok {
				out[j].end, out[j].ended = ev.at, true
				delete(open, k)
			}
		}
		for _, j := range open {
			if c.killed != 0 {
				out[j].end = c.killed
			} else {
				out[j].end = end
			}
		}
	}
	return out
}

// maxOverlap is the most intervals of one key open at once (ends before starts at a tie).
func maxOverlap(iv []interval) map[string]int {
	type pt struct {
		at    int64
		delta int
		key   string
	}
	pts := make([]pt, 0, 2*len(iv))
	for _, v := range iv {
		pts = append(pts, pt{v.start, 1, v.key}, pt{v.end, -1, v.key})
	}
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].at != pts[j].at {
			return pts[i].at < pts[j].at
		}
		return pts[i].delta < pts[j].delta
	})
	cur, best := map[string]int{}, map[string]int{}
	for _, p := range pts {
		cur[p.key] += p.delta
		best[p.key] = max(best[p.key], cur[p.key])
	}
	return best
}

// freshDB creates a database, migrates it and returns a pool of maxConns on it, its URL and a
// cleanup (close the pool, drop the database). Every part of the command runs on one.
func freshDB(ctx context.Context, adminURL, dbname string, maxConns int32) (*pgxpool.Pool, string, func(), error) {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, "", nil, err
	}
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+dbname+" WITH (FORCE)")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbname); err != nil {
		admin.Close(ctx)
		return nil, "", nil, err
	}
	cleanup := func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dbname+" WITH (FORCE)")
		admin.Close(context.Background())
	}
	url := pgserver.DatabaseURL(adminURL, dbname)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	if _, err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		cleanup()
		return nil, "", nil, err
	}
	return pool, url, func() { pool.Close(); cleanup() }, nil
}

// sampler queries q every 10 ms until ctx ends; it returns the samples taken and their max.
type sampleResult struct {
	n, maxV, errs int
	maxGap        time.Duration
}

func sample(ctx context.Context, pool *pgxpool.Pool, q string, args ...any) sampleResult {
	var r sampleResult
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return r
		case <-tick.C:
		}
		var v int
		if err := pool.QueryRow(ctx, q, args...).Scan(&v); err != nil {
			if ctx.Err() == nil {
				r.errs++
			}
			continue
		}
		now := time.Now()
		if !last.IsZero() {
			r.maxGap = max(r.maxGap, now.Sub(last))
		}
		last = now
		r.n++
		r.maxV = max(r.maxV, v)
	}
}

const (
	globalSlots   = 10
	globalProcs   = 4
	globalHandler = 50 * time.Millisecond
	limitsWarmup  = 2 * time.Second
)

// defaultGlobalModes are the MaxRunning values of the global benchmark (-limits-global), run
// in this order each round (0 = no limit). 80 is a diagnostic: a limit above the 40 slots, to
// tell the cost of the exclusive claims from that of counting jobs whose finish is still
// being written. A limit of 1,100 or more lets the claims take grants (worker/limits.go).
const defaultGlobalModes = "0,40,80,25"

func parseModes(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("-limits-global: bad MaxRunning %q", f)
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

type globalResult struct {
	Mode         string  `json:"mode"`
	Round        int     `json:"round"`
	Limit        int     `json:"max_running"` // 0 = no limit
	Backlog      int     `json:"backlog"`
	MeasuredS    float64 `json:"measured_s"`
	Completed    int     `json:"completed_in_interval"`
	JobsPerS     float64 `json:"jobs_per_s"`
	TableMax     int     `json:"table_max_running"`
	TableSamples int     `json:"table_samples"`
	TableMaxGapS float64 `json:"table_max_gap_s"`
	HandlerMax   int     `json:"handler_max_running"`
}

func runGlobal(ctx context.Context, adminURL string, limit, round int, d time.Duration) (globalResult, error) {
	mode := "no limit"
	var limits []worker.Limit
	if limit > 0 {
		mode = fmt.Sprintf("MaxRunning %d", limit)
		limits = []worker.Limit{{Kind: globalJob{}.Kind(), MaxRunning: limit}}
	}
	pool, url, cleanup, err := freshDB(ctx, adminURL, fmt.Sprintf("tenure_limits_global_%d_%d_%d", limit, round, os.Getpid()), 8)
	if err != nil {
		return globalResult{}, err
	}
	defer cleanup()
	rate := float64(globalProcs*globalSlots) / globalHandler.Seconds()
	backlog := int(rate * (d + limitsWarmup + 2*time.Second).Seconds() * 1.2)
	client, err := jobs.NewClient(pool, nil)
	if err != nil {
		return globalResult{}, err
	}
	fmt.Fprintf(os.Stderr, "== limits/global round %d, %s: queueing %d jobs\n", round, mode, backlog)
	for left := backlog; left > 0; {
		n := min(left, 5000)
		ps := make([]jobs.InsertManyParams, n)
		for i := range ps {
			ps[i] = jobs.InsertManyParams{Args: globalJob{N: i}}
		}
		if _, err := client.InsertMany(ctx, ps); err != nil {
			return globalResult{}, err
		}
		left -= n
	}
	f := &fleet{spec: childSpec{DB: url, Kind: globalJob{}.Kind(), Concurrency: globalSlots, Handler: globalHandler, Limits: limits},
		perChild: map[int][]int{}}
	defer f.stop()
	for range globalProcs {
		if _, err := f.start(); err != nil {
			return globalResult{}, err
		}
	}
	for _, c := range f.children {
		<-c.ready
	}
	// Sample the table from when every child is ready to the end of the measured interval
	// (warm-up included: the limit holds at every instant). The handlers' overlap covers
	// everything, the children's first claims before all were ready included.
	sctx, scancel := context.WithCancel(ctx)
	var sr sampleResult
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sr = sample(sctx, pool, `SELECT count(*) FROM tenure.jobs WHERE kind = $1 AND state = 'running' AND locked_until > now()`, globalJob{}.Kind())
	}()
	time.Sleep(limitsWarmup)
	t0 := time.Now()
	time.Sleep(d)
	t1 := time.Now()
	scancel()
	wg.Wait()
	f.stop()
	r := globalResult{Mode: mode, Round: round, Limit: limit, Backlog: backlog, MeasuredS: t1.Sub(t0).Seconds(),
		TableMax: sr.maxV, TableSamples: sr.n, TableMaxGapS: sr.maxGap.Seconds()}
	ivs := f.intervals(t1.UnixNano())
	for _, v := range ivs {
		if v.ended && v.end >= t0.UnixNano() && v.end < t1.UnixNano() {
			r.Completed++
		}
	}
	r.JobsPerS = float64(r.Completed) / r.MeasuredS
	r.HandlerMax = maxOverlap(ivs)["-"]
	fmt.Fprintf(os.Stderr, "   %.0f jobs/s; max running: table %d (%d samples), handlers %d\n", r.JobsPerS, r.TableMax, r.TableSamples, r.HandlerMax)
	if sr.errs > 0 {
		fmt.Fprintf(os.Stderr, "   %d sample queries failed\n", sr.errs)
	}
	return r, nil
}

const (
	keyedKeys    = 5
	keyedProcs   = 4
	keyedHandler = 200 * time.Millisecond
	keyedLease   = 2 * time.Second
)

type perKeyResult struct {
	Keys            int     `json:"keys"`
	Processes       int     `json:"processes"`
	LeaseS          float64 `json:"lease_s"`
	HandlerMs       float64 `json:"handler_ms"`
	Jobs            int     `json:"jobs"`
	KillPhaseS      float64 `json:"kill_phase_s"`
	Kills           int     `json:"kills"`
	TableSamples    int     `json:"table_samples"`
	TableMaxGapS    float64 `json:"table_max_gap_s"`
	TableMaxPerKey  int     `json:"table_max_per_key"`
	HandlerMaxKey   int     `json:"handler_max_per_key"`
	Starts          int     `json:"handler_starts"`
	Ends            int     `json:"handler_ends"`
	Interrupted     int     `json:"handlers_killed"`
	Succeeded       int     `json:"succeeded"`
	NotSucceeded    int     `json:"not_succeeded"`
	RetriedJobs     int     `json:"jobs_with_more_than_one_attempt"`
	AllDoneS        float64 `json:"all_done_after_s"`
	AllDone         bool    `json:"all_done"`
	TableSampleErrs int     `json:"table_sample_errors"`
}

func runPerKey(ctx context.Context, adminURL string, d time.Duration) (perKeyResult, error) {
	pool, url, cleanup, err := freshDB(ctx, adminURL, fmt.Sprintf("tenure_limits_perkey_%d", os.Getpid()), 8)
	if err != nil {
		return perKeyResult{}, err
	}
	defer cleanup()
	// Capacity is keys/handler = 25 jobs/s less the keys a kill blocks for up to a lease:
	// queue 80 % of what the kill phase could run without kills, so it runs to its end.
	n := int(float64(keyedKeys) / keyedHandler.Seconds() * d.Seconds() * 0.8)
	client, err := jobs.NewClient(pool, nil)
	if err != nil {
		return perKeyResult{}, err
	}
	ps := make([]jobs.InsertManyParams, n)
	for i := range ps {
		ps[i] = jobs.InsertManyParams{Args: keyedJob{N: i}, Opts: &jobs.InsertOpts{
			ConcurrencyKey: fmt.Sprintf("k%d", i%keyedKeys), Lease: keyedLease}}
	}
	if _, err := client.InsertMany(ctx, ps); err != nil {
		return perKeyResult{}, err
	}
	fmt.Fprintf(os.Stderr, "== limits/perkey: %d jobs over %d keys, %d processes, SIGKILL every 2-4 s for %v\n", n, keyedKeys, keyedProcs, d)
	f := &fleet{spec: childSpec{DB: url, Kind: keyedJob{}.Kind(), Concurrency: 10, Handler: keyedHandler,
		Limits: []worker.Limit{{Kind: keyedJob{}.Kind(), PerKey: true, MaxRunning: 1}}}, perChild: map[int][]int{}}
	defer f.stop()
	live := map[int]*child{}
	for range keyedProcs {
		c, err := f.start()
		if err != nil {
			return perKeyResult{}, err
		}
		live[c.idx] = c
	}
	for _, c := range live {
		<-c.ready
	}
	sctx, scancel := context.WithCancel(ctx)
	var sr sampleResult
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sr = sample(sctx, pool, `SELECT coalesce(max(c), 0)::int FROM (SELECT count(*) AS c FROM tenure.jobs
			WHERE kind = $1 AND state = 'running' AND locked_until > now()
			GROUP BY metadata ->> 'tenure.concurrency_key') s`, keyedJob{}.Kind())
	}()
	remaining := func() int {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE kind = $1 AND state NOT IN ('succeeded', 'dead', 'cancelled')`, keyedJob{}.Kind()).Scan(&left); err != nil {
			return -1
		}
		return left
	}
	start := time.Now()
	kills := 0
	for time.Since(start) < d {
		time.Sleep(2*time.Second + time.Duration(rand.Int64N(int64(2*time.Second))))
		if remaining() == 0 {
			break
		}
		idxs := make([]int, 0, len(live))
		for i := range live {
			idxs = append(idxs, i)
		}
		sort.Ints(idxs)
		victim := live[idxs[rand.IntN(len(idxs))]]
		f.kill(victim)
		delete(live, victim.idx)
		kills++
		c, err := f.start()
		if err != nil {
			scancel()
			wg.Wait()
			return perKeyResult{}, err
		}
		live[c.idx] = c
		<-c.ready
	}
	killPhase := time.Since(start)
	// Then no more kills: every job must end succeeded (reclaimed jobs retry with backoff).
	deadline := time.Now().Add(2 * time.Minute)
	allDone := false
	for time.Now().Before(deadline) {
		if remaining() == 0 {
			allDone = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	doneAfter := time.Since(start)
	scancel()
	wg.Wait()
	f.stop()
	r := perKeyResult{Keys: keyedKeys, Processes: keyedProcs, LeaseS: keyedLease.Seconds(), HandlerMs: float64(keyedHandler.Milliseconds()),
		Jobs: n, KillPhaseS: killPhase.Seconds(), Kills: kills, TableSamples: sr.n, TableMaxGapS: sr.maxGap.Seconds(),
		TableMaxPerKey: sr.maxV, TableSampleErrs: sr.errs, AllDone: allDone, AllDoneS: doneAfter.Seconds()}
	ivs := f.intervals(time.Now().UnixNano())
	for _, v := range ivs {
		r.Starts++
		if v.ended {
			r.Ends++
		} else {
			r.Interrupted++
		}
	}
	for _, m := range maxOverlap(ivs) {
		r.HandlerMaxKey = max(r.HandlerMaxKey, m)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state <> 'succeeded'),
		count(*) FILTER (WHERE attempts > 1) FROM tenure.jobs WHERE kind = $1`, keyedJob{}.Kind()).Scan(&r.Succeeded, &r.NotSucceeded, &r.RetriedJobs); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "   %d kills, max per key: table %d (%d samples), handlers %d; %d/%d succeeded, %d retried\n",
		r.Kills, r.TableMaxPerKey, r.TableSamples, r.HandlerMaxKey, r.Succeeded, r.Jobs, r.RetriedJobs)
	return r, nil
}

const (
	rateProcs   = 2
	rateSlots   = 50
	rateHandler = 10 * time.Millisecond
	ratePer     = time.Second
)

type rateResult struct {
	Rate        int     `json:"rate"`
	PerS        float64 `json:"per_s"`
	OfferedPerS float64 `json:"offered_per_s"`
	OfferS      float64 `json:"offer_s"`
	Offered     int     `json:"offered"`
	Windows     int     `json:"full_windows"`
	Max         int     `json:"max_starts"`
	Min         int     `json:"min_starts"`
	Mean        float64 `json:"mean_starts"`
	MeanOverR   float64 `json:"mean_over_rate"`
	Over        int     `json:"windows_over_rate"`
	Starts      []int   `json:"starts_per_window"`
}

func runRate(ctx context.Context, adminURL string, rate int, d time.Duration) (rateResult, error) {
	pool, url, cleanup, err := freshDB(ctx, adminURL, fmt.Sprintf("tenure_limits_rate_%d", os.Getpid()), 8)
	if err != nil {
		return rateResult{}, err
	}
	defer cleanup()
	client, err := jobs.NewClient(pool, nil)
	if err != nil {
		return rateResult{}, err
	}
	f := &fleet{spec: childSpec{DB: url, Kind: rateJob{}.Kind(), Concurrency: rateSlots, Handler: rateHandler,
		Limits: []worker.Limit{{Kind: rateJob{}.Kind(), Rate: rate, Per: ratePer}}}, perChild: map[int][]int{}}
	defer f.stop()
	for range rateProcs {
		if _, err := f.start(); err != nil {
			return rateResult{}, err
		}
	}
	for _, c := range f.children {
		<-c.ready
	}
	offered := 5 * float64(rate) / ratePer.Seconds()
	fmt.Fprintf(os.Stderr, "== limits/rate: %d per %v, %g jobs/s offered for %v, %d processes × %d slots\n", rate, ratePer, offered, d, rateProcs, rateSlots)
	tick := time.NewTicker(10 * time.Millisecond)
	var owed float64
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		<-tick.C
		owed += offered / 100
		var ps []jobs.InsertManyParams
		for ; owed >= 1; owed-- {
			ps = append(ps, jobs.InsertManyParams{Args: rateJob{N: n}})
			n++
		}
		if len(ps) > 0 {
			if _, err := client.InsertMany(ctx, ps); err != nil {
				tick.Stop()
				return rateResult{}, err
			}
		}
	}
	tick.Stop()
	// The offering period on the database clock: the first and the last insert.
	var first, last time.Time
	if err := pool.QueryRow(ctx, `SELECT min(created_at), max(created_at) FROM tenure.jobs WHERE kind = $1`, rateJob{}.Kind()).Scan(&first, &last); err != nil {
		return rateResult{}, err
	}
	// Let the claims of the last full window land before stopping.
	time.Sleep(ratePer + 500*time.Millisecond)
	f.stop()
	per := ratePer.Nanoseconds()
	lo := (first.UnixNano() + per - 1) / per // first window starting at or after the first insert
	hi := last.UnixNano()/per - 1            // last window ending at or before the last insert
	r := rateResult{Rate: rate, PerS: ratePer.Seconds(), OfferedPerS: offered, OfferS: d.Seconds(), Offered: n, Min: math.MaxInt}
	if hi < lo {
		return r, errors.New("rate: no full window in the offering period")
	}
	counts := make([]int, hi-lo+1)
	f.mu.Lock()
	for _, ev := range f.events {
		if !ev.start {
			continue
		}
		if k := ev.claimed / per; k >= lo && k <= hi {
			counts[k-lo]++
		}
	}
	f.mu.Unlock()
	sum := 0
	for _, c := range counts {
		sum += c
		r.Max = max(r.Max, c)
		r.Min = min(r.Min, c)
		if c > rate {
			r.Over++
		}
	}
	r.Windows = len(counts)
	r.Starts = counts
	r.Mean = float64(sum) / float64(len(counts))
	r.MeanOverR = r.Mean / float64(rate)
	fmt.Fprintf(os.Stderr, "   %d full windows: starts max %d min %d mean %.2f (%.3f of the rate)\n", r.Windows, r.Max, r.Min, r.Mean, r.MeanOverR)
	return r, nil
}

type limitsResult struct {
	DurationS     float64         `json:"duration_s"`
	RateDurationS float64         `json:"rate_duration_s"`
	LoadEnd       string          `json:"loadavg_at_end"`
	Rounds        int             `json:"rounds"`
	Load          string          `json:"loadavg_at_start"`
	Global        []globalResult  `json:"global"`
	PerKey        *perKeyResult   `json:"per_key"`
	Rate          *rateResult     `json:"rate"`
	Summary       []globalSummary `json:"global_summary"`
}

type globalSummary struct {
	Mode       string  `json:"mode"`
	JobsPerS   float64 `json:"mean_jobs_per_s"`
	Ratio      float64 `json:"ratio_to_no_limit"`
	TableMax   int     `json:"table_max_running"`
	HandlerMax int     `json:"handler_max_running"`
}

func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(raw))
}

// runLimits runs the three benchmarks: the global modes interleaved round by round.
func runLimits(ctx context.Context, adminURL string, d, rateD time.Duration, rounds, rate int, modes string, skipProofs bool) (*limitsResult, error) {
	globalModes, err := parseModes(modes)
	if err != nil {
		return nil, err
	}
	res := &limitsResult{DurationS: d.Seconds(), RateDurationS: rateD.Seconds(), Rounds: rounds, Load: loadavg()}
	for round := 1; round <= rounds && len(globalModes) > 0; round++ {
		for _, limit := range globalModes {
			r, err := runGlobal(ctx, adminURL, limit, round, d)
			if err != nil {
				return nil, fmt.Errorf("global: %w", err)
			}
			res.Global = append(res.Global, r)
		}
	}
	sums := map[int]*globalSummary{}
	counts := map[int]int{}
	for _, g := range res.Global {
		s := sums[g.Limit]
		if s == nil {
			s = &globalSummary{Mode: g.Mode}
			sums[g.Limit] = s
		}
		s.JobsPerS += g.JobsPerS
		counts[g.Limit]++
		s.TableMax = max(s.TableMax, g.TableMax)
		s.HandlerMax = max(s.HandlerMax, g.HandlerMax)
	}
	for _, l := range globalModes {
		if s := sums[l]; s != nil {
			s.JobsPerS /= float64(counts[l])
		}
	}
	for _, l := range globalModes {
		if s := sums[l]; s != nil {
			if sums[0] != nil {
				s.Ratio = s.JobsPerS / sums[0].JobsPerS
			}
			res.Summary = append(res.Summary, *s)
		}
	}
	if !skipProofs {
		pk, err := runPerKey(ctx, adminURL, d)
		if err != nil {
			return nil, fmt.Errorf("per key: %w", err)
		}
		res.PerKey = &pk
		rr, err := runRate(ctx, adminURL, rate, rateD)
		if err != nil {
			return nil, fmt.Errorf("rate: %w", err)
		}
		res.Rate = &rr
	}
	res.LoadEnd = loadavg()
	return res, nil
}

func printLimits(w io.Writer, r *limitsResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nGlobal limit: %d worker processes × %d slots, %v handlers, pre-inserted backlog; %v measured per run after %v of warm-up; modes interleaved, %d rounds; load average (1, 5, 15 min) at start %s, at end %s\n\n",
		globalProcs, globalSlots, globalHandler, time.Duration(r.DurationS*float64(time.Second)), limitsWarmup, r.Rounds, r.Load, r.LoadEnd)
	fmt.Fprintln(w, "| round | mode | jobs/s | max running (table, 10 ms samples) | samples | max running (handlers, every instant) |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|")
	for _, g := range r.Global {
		fmt.Fprintf(w, "| %d | %s | %.0f | %d | %d | %d |\n", g.Round, g.Mode, g.JobsPerS, g.TableMax, g.TableSamples, g.HandlerMax)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| mode | mean jobs/s | ratio to no limit | max running (table) | max running (handlers) | target |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|")
	for _, s := range r.Summary {
		target := ""
		switch s.Mode {
		case "MaxRunning 40":
			target = fmt.Sprintf("ratio ≥ 0.95: %s; never > 40: %s", verdict(s.Ratio >= 0.95), verdict(s.TableMax <= 40 && s.HandlerMax <= 40))
		case "MaxRunning 25":
			target = "never > 25: " + verdict(s.TableMax <= 25 && s.HandlerMax <= 25)
		case "no limit":
		default:
			var l int
			_, _ = fmt.Sscanf(s.Mode, "MaxRunning %d", &l)
			target = fmt.Sprintf("diagnostic (limit above the slots); never > %d: %s", l, verdict(s.TableMax <= l && s.HandlerMax <= l))
		}
		fmt.Fprintf(w, "| %s | %.0f | %.3f | %d | %d | %s |\n", s.Mode, s.JobsPerS, s.Ratio, s.TableMax, s.HandlerMax, target)
	}
	if p := r.PerKey; p != nil {
		fmt.Fprintf(w, "\nLimit 1 per key under SIGKILL: %d keys, %d worker processes × 10 slots, %v leases, %v handlers, %d jobs; a random child SIGKILLed every 2-4 s and replaced\n\n",
			p.Keys, p.Processes, time.Duration(p.LeaseS*float64(time.Second)), time.Duration(p.HandlerMs*float64(time.Millisecond)), p.Jobs)
		fmt.Fprintln(w, "| kill phase (s) | kills | table samples | max running per key (table) | max running per key (handlers) | handler starts | killed mid-handler | jobs retried | succeeded | all done after (s) | target |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		fmt.Fprintf(w, "| %.1f | %d | %d | %d | %d | %d | %d | %d | %d/%d | %.1f | never 2: %s; all succeed: %s |\n",
			p.KillPhaseS, p.Kills, p.TableSamples, p.TableMaxPerKey, p.HandlerMaxKey, p.Starts, p.Interrupted, p.RetriedJobs,
			p.Succeeded, p.Jobs, p.AllDoneS, verdict(p.TableMaxPerKey <= 1 && p.HandlerMaxKey <= 1), verdict(p.AllDone && p.NotSucceeded == 0))
	}
	if q := r.Rate; q != nil {
		fmt.Fprintf(w, "\nRate limit: %d per %v, %g jobs/s offered (5×) for %v (%d jobs), %d worker processes × %d slots, %v handlers; starts counted per window on the database clock (AttemptedAt)\n\n",
			q.Rate, time.Duration(q.PerS*float64(time.Second)), q.OfferedPerS, time.Duration(q.OfferS*float64(time.Second)), q.Offered, rateProcs, rateSlots, rateHandler)
		fmt.Fprintln(w, "| full windows | max | min | mean | mean / R | windows over R | target |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---|")
		fmt.Fprintf(w, "| %d | %d | %d | %.2f | %.3f | %d | every window ≤ R: %s; mean within 5 %%: %s |\n",
			q.Windows, q.Max, q.Min, q.Mean, q.MeanOverR, q.Over, verdict(q.Over == 0), verdict(math.Abs(q.MeanOverR-1) <= 0.05))
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
