package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenureq/tenure/jobs"
)

func init() {
	register(&command{
		name:    "workers",
		summary: "list the worker registry: host, pid, queues, heartbeat age, last success, counters",
		run:     runWorkers,
	})
}

const workersUsage = `Usage: tenure workers [flags]

Lists the registered workers (tenure.workers): each running worker refreshes its row every
few seconds and deletes it when it stops gracefully; a killed worker's row shows EXPIRED
until another worker ages it out.`

func runWorkers(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "workers", workersUsage)
	dbURL := databaseFlag(fs)
	if code, done := parseFlags(e, fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		return exitCode(e, "tenure workers", usageErrorf("unexpected arguments: %v", fs.Args()))
	}
	pool, err := connect(ctx, e, *dbURL)
	if err != nil {
		return exitCode(e, "tenure workers", err)
	}
	defer pool.Close()
	c, err := jobs.NewClient(pool, e.clientConfig())
	if err != nil {
		return exitCode(e, "tenure workers", err)
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		return exitCode(e, "tenure workers", err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "ID\tHOST\tPID\tVERSION\tQUEUES\tUP\tHEARTBEAT_AGE\tLAST_SUCCESS\tRUNNING\tSUCCEEDED\tFAILED\tSTALE\tSTATUS")
	for _, w := range ws {
		qs := make([]string, 0, len(w.Queues))
		for name, q := range w.Queues {
			s := fmt.Sprintf("%s:%d", esc(name), q.Concurrency)
			if q.Paused {
				s += "(paused)"
			}
			qs = append(qs, s)
		}
		sort.Strings(qs)
		last := "never"
		if w.LastSuccessAt != nil {
			last = w.HeartbeatAt.Sub(*w.LastSuccessAt).Round(time.Second).String() + " before hb"
		}
		status := "ok"
		if w.Expired {
			status = "EXPIRED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\t%v\t%s\t%d\t%d\t%d\t%d\t%s\n", esc(w.ID), esc(w.Host), w.PID, esc(w.Version),
			strings.Join(qs, ","), w.HeartbeatAt.Sub(w.StartedAt).Round(time.Second), w.HeartbeatAge.Round(time.Millisecond),
			last, w.Counters["running"], w.Counters["succeeded"], w.Counters["retried"]+w.Counters["dead"],
			w.Counters["stale_rejected"], status)
	}
	if len(ws) == 0 {
		fmt.Fprintln(tw, "(no registered workers)")
	}
	return exitOK
}
