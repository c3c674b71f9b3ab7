package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tenureq/tenure/jobs"
)

func init() {
	register(&command{
		name:    "jobs",
		summary: "inspect jobs and act on them: list, get, stats, cancel, reinject, audit",
		run:     runJobs,
	})
}

const jobsUsage = `Usage: tenure jobs <action> [flags] [job id]

  list       list jobs (-state, -kind, -queue, -code, -limit, -after)
  get ID     show one job, with its error history
  stats      per queue and priority: ready/running/dead, oldest ready age, wait percentiles,
             and the top error codes of dead jobs (-window, default 5m)
  cancel ID  cancel a ready job, or ask the worker of a running one to cancel it
             (-actor and -reason required: the action is audited)
  reinject ID
             move a dead job back to ready with a fresh attempt budget
             (-actor, -reason required; -max-attempts to change the budget)
  audit [ID] list audited operator actions (of one job)`

func runJobs(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintln(e.stdout, jobsUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	action := args[0]
	fs := newFlagSet(e, "jobs "+action, jobsUsage)
	dbURL := databaseFlag(fs)
	state := fs.String("state", "", "(list) ready, running, succeeded, dead or cancelled")
	kind := fs.String("kind", "", "(list) job kind")
	queue := fs.String("queue", "", "(list) queue")
	code := fs.String("code", "", "(list) last error code, e.g. TIMEOUT")
	limit := fs.Int("limit", 50, "(list, audit) page size")
	after := fs.Int64("after", 0, "(list, audit) continue after this id")
	window := fs.Duration("window", 5*time.Minute, "(stats) window of the wait percentiles")
	actor := fs.String("actor", "", "(cancel, reinject) who acts, for the audit trail")
	reason := fs.String("reason", "", "(cancel, reinject) why, for the audit trail")
	maxAttempts := fs.Int("max-attempts", 0, "(reinject) new attempt budget (default: keep)")
	if code, done := parseFlags(e, fs, args[1:]); done {
		return code
	}
	var id int64
	needsID := action == "get" || action == "cancel" || action == "reinject"
	if fs.NArg() > 0 {
		v, err := strconv.ParseInt(fs.Arg(0), 10, 64)
		if err != nil || v <= 0 {
			return exitCode(e, "tenure jobs", usageErrorf("job id must be a positive integer, got %q", fs.Arg(0)))
		}
		id = v
		if code, done := parseFlags(e, fs, fs.Args()[1:]); done { // flags after the id
			return code
		}
	}
	if needsID && id == 0 {
		return exitCode(e, "tenure jobs "+action, usageErrorf("missing job id"))
	}
	url, err := databaseURL(e, *dbURL)
	if err != nil {
		return exitCode(e, "tenure jobs", err)
	}
	pool, err := openPool(ctx, url)
	if err != nil {
		return exitCode(e, "tenure jobs", err)
	}
	defer pool.Close()
	c, err := jobs.NewClient(pool, nil)
	if err != nil {
		return exitCode(e, "tenure jobs", err)
	}
	act := jobs.Action{Actor: *actor, Reason: *reason}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch action {
	case "list":
		page, err := c.List(ctx, jobs.ListParams{State: jobs.State(*state), Kind: *kind, Queue: *queue, ErrorCode: *code, AfterID: *after, Limit: *limit})
		if err != nil {
			return exitCode(e, "tenure jobs list", err)
		}
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tPRIO\tATTEMPTS\tRUN_AT\tLAST_ERROR")
		for _, j := range page.Jobs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d/%d\t%s\t%s\n", j.ID, j.Queue, j.Kind, j.State, j.Priority,
				j.Attempts, j.MaxAttempts, j.RunAt.Format(time.RFC3339), j.LastErrorCode)
		}
		if page.NextAfterID != 0 {
			fmt.Fprintf(tw, "(more: -after %d)\n", page.NextAfterID)
		}
	case "get":
		j, err := c.Get(ctx, id)
		if err != nil {
			return exitCode(e, "tenure jobs get", err)
		}
		fmt.Fprintf(tw, "id\t%d\nqueue\t%s\nkind\t%s (payload v%d)\nstate\t%s\npriority\t%d\nattempts\t%d/%d\ngeneration\t%d\nrun_at\t%s\nlease\t%v\npayload\t%s\n",
			j.ID, j.Queue, j.Kind, j.PayloadVersion, j.State, j.Priority, j.Attempts, j.MaxAttempts, j.Generation,
			j.RunAt.Format(time.RFC3339Nano), j.Lease, j.Payload)
		if j.LockedBy != "" {
			fmt.Fprintf(tw, "locked_by\t%s\n", j.LockedBy)
		}
		if j.LockedUntil != nil {
			fmt.Fprintf(tw, "locked_until\t%s\n", j.LockedUntil.Format(time.RFC3339Nano))
		}
		for _, h := range j.Errors {
			fmt.Fprintf(tw, "error\tattempt %d gen %d %s at %s: %s\n", h.Attempt, h.Generation, h.Code, h.At.Format(time.RFC3339), h.Message)
		}
	case "stats":
		s, err := c.Stats(ctx, *window)
		if err != nil {
			return exitCode(e, "tenure jobs stats", err)
		}
		fmt.Fprintln(tw, "QUEUE\tPRIO\tREADY\tSCHEDULED\tRUNNING\tDEAD\tOLDEST_READY\tWAIT_P50\tWAIT_P95\tWAIT_P99\tFINISHED")
		for _, b := range s.Bands {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%v\t%v\t%v\t%v\t%d\n", b.Queue, b.Priority, b.Ready, b.Scheduled, b.Running, b.Dead,
				b.OldestReadyAge.Round(time.Millisecond), b.WaitP50.Round(time.Millisecond), b.WaitP95.Round(time.Millisecond),
				b.WaitP99.Round(time.Millisecond), b.Finished)
		}
		if len(s.TopDeadCodes) > 0 {
			fmt.Fprintln(tw, "\nDEAD BY CODE\tKIND\tQUEUE\tJOBS")
			for _, d := range s.TopDeadCodes {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", d.Code, d.Kind, d.Queue, d.Jobs)
			}
		}
	case "cancel":
		out, err := c.Cancel(ctx, id, act)
		if err != nil {
			return exitCode(e, "tenure jobs cancel", err)
		}
		fmt.Fprintf(tw, "job %d: %s\n", id, out)
	case "reinject":
		j, err := c.Reinject(ctx, id, act, &jobs.ReinjectOpts{MaxAttempts: *maxAttempts})
		if err != nil {
			return exitCode(e, "tenure jobs reinject", err)
		}
		fmt.Fprintf(tw, "job %d: %s, attempts 0/%d\n", j.ID, j.State, j.MaxAttempts)
	case "audit":
		entries, err := c.Audit(ctx, id, *after, *limit)
		if err != nil {
			return exitCode(e, "tenure jobs audit", err)
		}
		fmt.Fprintln(tw, "ID\tAT\tACTOR\tACTION\tJOB\tREASON\tDETAIL")
		for _, a := range entries {
			job := "-"
			if a.JobID != nil {
				job = strconv.FormatInt(*a.JobID, 10)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.At.Format(time.RFC3339), a.Actor, a.Action, job, a.Reason, a.Detail)
		}
	default:
		return exitCode(e, "tenure jobs", usageErrorf("unknown action %q (list, get, stats, cancel, reinject, audit)", action))
	}
	return exitOK
}
