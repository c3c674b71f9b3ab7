// Command scaling measures how Tenure's cost grows (issue 17, part 4): throughput and the
// claim statement's latency against the ready backlog, the finished rows retained, the number
// of queues with work and the number of worker slots, each point on a fresh database; and a
// steady soak at a share of measured capacity with autovacuum on, sampling the queue table's
// size, its indexes, its dead tuples and the claim latency over time. It starts its own
// production-like PostgreSQL by default (the distribution's stock settings, autovacuum on,
// pg_stat_statements). See bench/README.md.
//
//	go run ./cmd/scaling                                  # every sweep and a 30-minute soak
//	go run ./cmd/scaling -quick                           # tiny sweeps, 9 s soak (< 1 minute)
//	go run ./cmd/scaling -sweeps backlog,workers
//	go run ./cmd/scaling -sweeps soak -soak-duration 10m
//	go run ./cmd/scaling -publish 2026-12-01              # also the dated report and the plots
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/internal/pgserver"
)

func main() {
	c, err := parseConfig(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scaling:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, &c); err != nil {
		fmt.Fprintln(os.Stderr, "scaling:", err)
		os.Exit(1)
	}
}

func pid() int { return os.Getpid() }

func logf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+f+"\n", a...)
}

// sweepDef describes one sweep: its axis and how a point's shape follows from its value.
type sweepDef struct {
	name, param, unit, title string
	points                   func(c *config) []int
	shape                    func(c *config, x int) shape
	note                     func(c *config) string
}

var sweepDefs = []sweepDef{
	{SweepBacklog, "ready backlog", "jobs", "Ready backlog",
		func(c *config) []int { return c.backlogs },
		func(c *config, x int) shape {
			return shape{Ready: x, Queues: 1, Slots: c.slots, Slice: min(x, c.slice)}
		},
		func(c *config) string {
			return fmt.Sprintf("one queue, %d slots, no finished rows; measured: the first min(backlog, %d) jobs burned down", c.slots, c.slice)
		}},
	{SweepFinished, "finished rows retained", "rows", "Finished rows retained",
		func(c *config) []int { return c.finished },
		func(c *config, x int) shape {
			return shape{Ready: c.fixedReady, Finished: x, Queues: 1, Slots: c.slots, Slice: c.slice}
		},
		func(c *config) string {
			return fmt.Sprintf("succeeded rows (finished over the last 20 h, older ids) + %d ready jobs, one queue, %d slots; measured: %d jobs burned down", c.fixedReady, c.slots, c.slice)
		}},
	{SweepQueues, "queues with work", "queues", "Queues with work",
		func(c *config) []int { return c.queues },
		func(c *config, x int) shape {
			return shape{Ready: c.fixedReady, Queues: x, Slots: c.slots, Slice: c.slice, SharedSlots: c.sharedSlots}
		},
		func(c *config) string {
			if c.sharedSlots {
				return fmt.Sprintf("%d ready jobs spread round-robin over the queues; one worker serving every queue (worker.Config.Queues) with a worker-wide pool of %d slots the queues share (worker.Config.Slots), each queue Concurrency = %d (its own cap); measured: %d jobs", c.fixedReady, c.slots, c.slots, c.slice)
			}
			return fmt.Sprintf("%d ready jobs spread round-robin over the queues; one worker serving every queue (worker.Config.Queues), each queue Concurrency = max(1, %d / queues), so 1000 queues run 1000 slots; measured: %d jobs", c.fixedReady, c.slots, c.slice)
		}},
	{SweepWorkers, "worker slots", "slots", "Worker slots",
		func(c *config) []int { return c.workers },
		func(c *config, x int) shape {
			return shape{Ready: c.fixedReady, Queues: 1, Slots: x, Slice: c.slice}
		},
		func(c *config) string {
			return fmt.Sprintf("one worker process, one queue with Concurrency = slots (2000 slots are one process), %d ready jobs; measured: %d jobs", c.fixedReady, c.slice)
		}},
}

func run(ctx context.Context, c *config) error {
	if c.render != "" {
		b, err := os.ReadFile(c.render)
		if err != nil {
			return err
		}
		rep := &Report{}
		if err := json.Unmarshal(b, rep); err != nil {
			return fmt.Errorf("-render %s: %w", c.render, err)
		}
		return writeReport(c, rep)
	}
	adminURL := c.adminURL
	if c.server == "own" {
		srv, err := pgserver.StartWith(ctx, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }, pgserver.Options{
			Stock: true, Settings: []string{"autovacuum=on", "shared_preload_libraries=pg_stat_statements"}})
		if err != nil {
			return fmt.Errorf("start the benchmark's own PostgreSQL (or use -server url): %w", err)
		}
		defer srv.Stop()
		adminURL = srv.URL
	}
	if err := pgutil.EnableStatements(ctx, adminURL); err != nil {
		logf("pg_stat_statements not available (%v): server-side statement columns omitted", err)
	}
	server, err := pgutil.ReadServerInfo(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("read server info: %w", err)
	}
	rep := &Report{}
	if c.merge != "" {
		b, err := os.ReadFile(c.merge)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, rep); err != nil {
			return fmt.Errorf("-merge %s: %w", c.merge, err)
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("merged with %s (started %s): sweeps not rerun come from it", c.merge, rep.Started.Format(time.RFC3339)))
	}
	rep.Started, rep.Quick, rep.Server = time.Now().UTC(), c.quick, server
	rep.Machine = readMachine()
	rep.Settings = c.describe(adminURL)
	started := time.Now()
	write := func() {
		rep.DurationS = time.Since(started).Seconds()
		if err := writeReport(c, rep); err != nil {
			logf("write report: %v", err)
		}
	}
	logf("scaling: sweeps %s, quick=%v, server %s", strings.Join(c.sweeps, ","), c.quick, server.Version)
	for _, d := range sweepDefs {
		if !contains(c.sweeps, d.name) {
			continue
		}
		sw := &Sweep{Name: d.name, Param: d.param, Unit: d.unit, Title: d.title, Description: d.note(c)}
		rep.setSweep(sw)
		for i, x := range d.points(c) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s := d.shape(c, x)
			logf("==> %s %d (ready %d, finished %d, queues %d, slots %d, slice %d) load %s", d.name, x, s.Ready, s.Finished, s.Queues, s.Slots, s.Slice, loadavg())
			p, err := runPoint(ctx, c, adminURL, fmt.Sprintf("tscale_%d_%s_%d", pid(), d.name, i), x, s, logf)
			if err != nil {
				msg := fmt.Sprintf("%s %d: %v", d.name, x, err)
				logf("    FAILED %s", msg)
				rep.Failures = append(rep.Failures, msg)
				continue
			}
			logf("    %s", p.summary())
			sw.Points = append(sw.Points, *p)
			write()
		}
	}
	if contains(c.sweeps, SweepSoak) && ctx.Err() == nil {
		logf("==> soak: %v at %.0f%% of capacity, autovacuum on, load %s", c.soakDur, c.soakLoad*100, loadavg())
		sk, err := runSoak(ctx, c, adminURL, logf, func(s *Soak) { rep.Soak = s; write() })
		if err != nil {
			msg := fmt.Sprintf("soak: %v", err)
			logf("    FAILED %s", msg)
			rep.Failures = append(rep.Failures, msg)
		} else {
			rep.Soak = sk
		}
	}
	write()
	fmt.Print(rep.markdown())
	if len(rep.Failures) > 0 {
		return fmt.Errorf("%d point(s) failed", len(rep.Failures))
	}
	return ctx.Err()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (p *Point) summary() string {
	s := fmt.Sprintf("%d jobs in %.2fs = %.0f jobs/s; claim p50 %.2f p99 %.2f ms (%d claims, %.1f jobs/claim); worker claim p99 %.2f ms; preload %.1fs; load %s",
		p.Jobs, p.ElapsedS, p.JobsPerS, p.Claim.P50Ms, p.Claim.P99Ms, p.Claim.Count, p.JobsPerClaim, p.WorkerClaimP99Ms, p.PreloadS, p.LoadAfter)
	if p.Explain != nil {
		s += fmt.Sprintf("; explain %.2f ms, %s", p.Explain.ExecMs, p.Explain.Buffers)
	}
	if p.Error != "" {
		s += "; ERROR " + p.Error
	}
	return s
}

func readMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		l, _, _ := strings.Cut(string(b), "\n")
		m.Memory = strings.Join(strings.Fields(l)[1:], " ")
	}
	return m
}

func (c *config) describe(adminURL string) map[string]string {
	srv := "own (production-like: the distribution's stock settings, autovacuum on, pg_stat_statements; started by the tool)"
	if c.server == "url" {
		srv = "url: " + adminURL
	}
	return map[string]string{
		"server":           srv,
		"payload":          fmt.Sprintf("≈%d bytes of JSON args", c.payload),
		"handler":          "no-op (returns nil at once)",
		"worker":           "library defaults except Queues; engine pool: the library's default size (worker.EnginePoolSize) capped at " + fmt.Sprint(c.engineCap) + ", the engine's session settings, plus a pgx QueryTracer timing claim statements",
		"standard slots":   fmt.Sprint(c.slots),
		"slice":            fmt.Sprint(c.slice),
		"fixed ready":      fmt.Sprint(c.fixedReady),
		"soak":             fmt.Sprintf("%v at %.0f%% of capacity, FinishedRetention %v, sampled every %v", c.soakDur, c.soakLoad*100, c.soakRetain, c.sampleEvery),
		"capacity run":     fmt.Sprintf("%v saturated (2 producers keep %d jobs ahead), after a warm-up", c.capacityDur, 20*c.slots),
		"pre-insert":       "INSERT ... SELECT generate_series from a template job inserted with jobs.Client.InsertMany, then VACUUM (ANALYZE) and CHECKPOINT",
		"process":          "everything in one process (points run one after the other, each on a fresh database)",
		"claim latency":    "client side: pgx QueryTracer on the engine pool, from send to result read, excluding the wait for a pool connection (worker.Stats().ClaimP99 includes it)",
		"server-side mean": "pg_stat_statements mean execution time of the claim statement over the measured window",
	}
}
