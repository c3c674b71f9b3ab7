package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/jobs"
)

func init() {
	register(&command{
		name:    "queue",
		summary: "pause or resume a queue cluster-wide (audited), or list queues with their pause state",
		run:     runQueue,
	})
	register(&command{
		name:    "periodic",
		summary: "list the periodic (cron and interval) schedules: spec, next run, last job",
		run:     runPeriodic,
	})
}

const queueUsage = `Usage: tenure queue <action> [flags] [queue]

  list          queues an operator paused or resumed, and queues live workers serve, with their
                pause state and the number of live workers serving them
  pause QUEUE   stop every worker from claiming from QUEUE (within about a second; running
                jobs finish normally; enqueues are still accepted); survives restarts
  resume QUEUE  let workers claim from QUEUE again

pause and resume are audited: -actor (who) and -reason (why) are required. A queue that no
live worker serves, with no ready, running or dead jobs, no periodic schedule, and not paused,
is refused as a probable typo unless -force is given.`

func runQueue(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintln(e.stdout, queueUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	action := args[0]
	switch action {
	case "list", "pause", "resume":
	default:
		return exitCode(e, "tenure queue", usageErrorf("unknown action %q (list, pause, resume; see tenure queue -h)", action))
	}
	prefix := "tenure queue " + action
	fs := newFlagSet(e, "queue "+action, queueUsage)
	dbURL := databaseFlag(fs)
	actor := fs.String("actor", "", "(pause, resume) who acts, for the audit trail")
	reason := fs.String("reason", "", "(pause, resume) why, for the audit trail")
	force := fs.Bool("force", false, "(pause, resume) act on a queue no live worker serves and that has no jobs")
	if code, done := parseFlags(e, fs, args[1:]); done {
		return code
	}
	var queue string
	if fs.NArg() > 0 {
		queue = fs.Arg(0)
		if code, done := parseFlags(e, fs, fs.Args()[1:]); done { // flags after the queue
			return code
		}
		if fs.NArg() > 0 {
			return exitCode(e, prefix, usageErrorf("unexpected arguments %q", fs.Args()))
		}
	}
	if action == "list" && queue != "" {
		return exitCode(e, prefix, usageErrorf("list takes no queue"))
	}
	if action != "list" {
		if queue == "" {
			return exitCode(e, prefix, usageErrorf("missing queue name"))
		}
		if !jobs.ValidQueueName(queue) {
			return exitCode(e, prefix, usageErrorf("%q is not a valid queue name", queue))
		}
		var missing []string
		if *actor == "" {
			missing = append(missing, "-actor (who acts)")
		}
		if *reason == "" {
			missing = append(missing, "-reason (why)")
		}
		if len(missing) > 0 {
			return exitCode(e, prefix, usageErrorf("%s is audited: %s required, e.g. tenure queue %s %s -actor ops@example.com -reason \"...\"",
				action, strings.Join(missing, " and "), action, queue))
		}
	}
	pool, err := connect(ctx, e, *dbURL)
	if err != nil {
		return exitCode(e, prefix, err)
	}
	defer pool.Close()
	c, err := jobs.NewClient(pool, e.clientConfig())
	if err != nil {
		return exitCode(e, prefix, err)
	}
	act := jobs.Action{Actor: *actor, Reason: *reason}
	switch action {
	case "pause", "resume":
		if !*force {
			known, err := queueKnown(ctx, pool, e.schema, queue)
			if err != nil {
				return exitCode(e, prefix, err)
			}
			if !known {
				return exitCode(e, prefix, fmt.Errorf("%w: %q: no live worker serves it, it has no ready, running or dead jobs, "+
					"no periodic schedule and it is not paused (a typo? tenure queue list shows the queues workers serve); "+
					"pass -force to %s it anyway", errUnknownQueue, queue, action))
			}
		}
		f := c.PauseQueue
		if action == "resume" {
			f = c.ResumeQueue
		}
		out, err := f(ctx, queue, act)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		switch out {
		case jobs.QueueUnchanged:
			fmt.Fprintf(e.stdout, "queue %s was already %s (recorded in the audit trail)\n", esc(queue), map[string]string{"pause": "paused", "resume": "running"}[action])
		default:
			fmt.Fprintf(e.stdout, "queue %s %s\n", esc(queue), esc(string(out)))
		}
		return exitOK
	}
	qs, err := c.ListQueues(ctx)
	if err != nil {
		return exitCode(e, prefix, err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "QUEUE\tSTATE\tWORKERS\tSINCE\tBY\tREASON")
	for _, q := range qs {
		state, since := "running", "-"
		if q.Paused {
			state = "PAUSED"
			since = q.PausedAt.UTC().Format(time.RFC3339)
		} else if q.UpdatedAt != nil {
			since = q.UpdatedAt.UTC().Format(time.RFC3339)
		}
		by, why := orDash(esc(q.UpdatedBy)), orDash(esc(q.Reason))
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", esc(q.Name), state, q.Workers, since, by, why)
	}
	if len(qs) == 0 {
		fmt.Fprintln(tw, "(no queues: none paused or resumed, no live workers)")
	}
	return exitOK
}

// errUnknownQueue refuses tenure queue pause/resume of a queue nothing knows (without -force).
var errUnknownQueue = errors.New("unknown queue")

// queueKnown reports whether queue is one an operator may mean: a live registered worker
// serves it (tenure.workers.queues), it has ready, running or dead jobs (each looked up
// through an index: jobs_ready_idx, jobs_running_idx, jobs_dead_idx), a periodic schedule
// enqueues into it, or it is paused (so a forced pause can be resumed without -force).
func queueKnown(ctx context.Context, pool *pgxpool.Pool, schema, queue string) (bool, error) {
	var known bool
	err := pool.QueryRow(ctx, dbschema.Must(schema).Rewrite(`SELECT
		EXISTS (SELECT 1 FROM tenure.workers WHERE expires_at > now() AND queues ? $1)
		OR EXISTS (SELECT 1 FROM tenure.jobs WHERE state = 'ready' AND queue = $1)
		OR EXISTS (SELECT 1 FROM tenure.jobs WHERE state = 'dead' AND queue = $1)
		OR EXISTS (SELECT 1 FROM tenure.jobs WHERE locked_until IS NOT NULL AND state = 'running' AND queue = $1)
		OR EXISTS (SELECT 1 FROM tenure.periodic WHERE queue = $1)
		OR EXISTS (SELECT 1 FROM tenure.queues WHERE name = $1 AND paused)`), queue).Scan(&known)
	if err != nil {
		return false, fmt.Errorf("looking up queue %q: %w", queue, err)
	}
	return known, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const periodicUsage = `Usage: tenure periodic list [flags]

Lists the periodic schedules (tenure.periodic) workers registered: name, schedule, kind and
queue, the next tick (due when the database clock reaches it), the last enqueued job and its
tick, and the ticks missed while no worker ran. A schedule OVERDUE by more than a few seconds
has no running worker.`

func runPeriodic(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintln(e.stdout, periodicUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] != "list" {
		return exitCode(e, "tenure periodic", usageErrorf("unknown action %q (list; see tenure periodic -h)", args[0]))
	}
	prefix := "tenure periodic list"
	fs := newFlagSet(e, "periodic list", periodicUsage)
	dbURL := databaseFlag(fs)
	if code, done := parseFlags(e, fs, args[1:]); done {
		return code
	}
	if fs.NArg() > 0 {
		return exitCode(e, prefix, usageErrorf("unexpected arguments %q", fs.Args()))
	}
	pool, err := connect(ctx, e, *dbURL)
	if err != nil {
		return exitCode(e, prefix, err)
	}
	defer pool.Close()
	c, err := jobs.NewClient(pool, e.clientConfig())
	if err != nil {
		return exitCode(e, prefix, err)
	}
	ps, err := c.Periodic(ctx)
	if err != nil {
		return exitCode(e, prefix, err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "NAME\tSPEC\tKIND\tQUEUE\tNEXT_RUN\tLAST_JOB\tLAST_TICK\tLAST_ENQUEUED\tMISSED\tSTATUS")
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	for _, p := range ps {
		job := "-"
		if p.LastJobID != nil {
			job = fmt.Sprint(*p.LastJobID)
		}
		status := "ok"
		if p.Overdue > 5*time.Second {
			status = "OVERDUE " + p.Overdue.Round(time.Second).String()
		}
		next := p.NextRunAt
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", esc(p.Name), esc(p.Spec), esc(p.Kind), esc(p.Queue), ts(&next), job,
			ts(p.LastTickAt), ts(p.LastEnqueuedAt), p.Missed, status)
	}
	if len(ps) == 0 {
		fmt.Fprintln(tw, "(no periodic schedules)")
	}
	return exitOK
}
