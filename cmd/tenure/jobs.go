package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

func init() {
	register(&command{
		name:    "jobs",
		summary: "inspect jobs and act on them: list, get, stats, cancel, retry, reinject, delete, audit",
		run:     runJobs,
	})
}

const jobsUsage = `Usage: tenure jobs <action> [flags] [job id]

  list       list jobs (-state, -kind, -queue, -code, -tag (repeatable: every tag given),
             -limit, -after; -json)
  get ID     show one job, with its error history (-json)
  stats      per queue and priority: ready/running/dead, oldest ready age, wait percentiles,
             and the top error codes of dead jobs (-window, default 5m; -json). Queues with
             ready jobs, none running and the oldest waiting longer than -unserved-after
             (default 1m) are flagged: probably no worker serves them. From the worker
             registry: SERVED (a live worker serves the queue), NO_WORKER (ready jobs no
             live worker can run: none serves the queue and registers the kind), listed
             per queue and kind under NO LIVE WORKER.
  cancel ID  cancel a ready job, or ask the worker of a running one to cancel it
  retry ID   run a ready job now (keeping its attempts), or move a dead or cancelled job
             back to ready with a fresh attempt budget
  reinject ID
             move a dead job back to ready with a fresh attempt budget (-max-attempts to
             change the budget)
  delete ID  delete a job that is not running, with its effect-ledger rows
  audit [ID] list audited operator actions (of one job)

cancel, retry, reinject and delete are audited: -actor (who) and -reason (why) are required.`

// auditedActions need -actor and -reason.
var auditedActions = map[string]bool{"cancel": true, "retry": true, "reinject": true, "delete": true}

func runJobs(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintln(e.stdout, jobsUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	action := args[0]
	switch action {
	case "list", "get", "stats", "cancel", "retry", "reinject", "delete", "audit":
	default:
		return exitCode(e, "tenure jobs", usageErrorf("unknown action %q (list, get, stats, cancel, retry, reinject, delete, audit; see tenure jobs -h)", action))
	}
	fs := newFlagSet(e, "jobs "+action, jobsUsage)
	dbURL := databaseFlag(fs)
	state := fs.String("state", "", "(list) ready, running, succeeded, dead or cancelled")
	kind := fs.String("kind", "", "(list) job kind")
	queue := fs.String("queue", "", "(list) queue")
	code := fs.String("code", "", "(list) last error code, e.g. TIMEOUT")
	var tags []string
	fs.Func("tag", "(list) keep jobs carrying this tag; repeat for several (all must match)", func(s string) error {
		tags = append(tags, s)
		return nil
	})
	limit := fs.Int("limit", 50, "(list, audit) page size")
	after := fs.Int64("after", 0, "(list, audit) continue after this id")
	window := fs.Duration("window", 5*time.Minute, "(stats) window of the wait percentiles")
	unservedAfter := fs.Duration("unserved-after", time.Minute, "(stats) flag a queue whose oldest ready job waited this long with none of its jobs running")
	asJSON := fs.Bool("json", false, "(list, get, stats) print JSON instead of a table")
	actor := fs.String("actor", "", "(cancel, retry, reinject, delete) who acts, for the audit trail")
	reason := fs.String("reason", "", "(cancel, retry, reinject, delete) why, for the audit trail")
	maxAttempts := fs.Int("max-attempts", 0, "(reinject) new attempt budget (default: keep)")
	if code, done := parseFlags(e, fs, args[1:]); done {
		return code
	}
	var id int64
	needsID := action == "get" || auditedActions[action]
	if fs.NArg() > 0 {
		v, err := strconv.ParseInt(fs.Arg(0), 10, 64)
		if err != nil || v <= 0 {
			return exitCode(e, "tenure jobs", usageErrorf("job id must be a positive integer, got %q", fs.Arg(0)))
		}
		id = v
		if code, done := parseFlags(e, fs, fs.Args()[1:]); done { // flags after the id
			return code
		}
		if fs.NArg() > 0 {
			return exitCode(e, "tenure jobs "+action, usageErrorf("unexpected arguments %q", fs.Args()))
		}
	}
	prefix := "tenure jobs " + action
	if needsID && id == 0 {
		return exitCode(e, prefix, usageErrorf("missing job id"))
	}
	if *state != "" && !generics.JobState(*state).Valid() {
		return exitCode(e, prefix, usageErrorf("-state: unknown state %q (ready, running, succeeded, dead or cancelled)", *state))
	}
	if auditedActions[action] {
		var missing []string
		if *actor == "" {
			missing = append(missing, "-actor (who acts)")
		}
		if *reason == "" {
			missing = append(missing, "-reason (why)")
		}
		if len(missing) > 0 {
			return exitCode(e, prefix, usageErrorf("%s is audited: %s required, e.g. tenure jobs %s %d -actor ops@example.com -reason \"...\"",
				action, strings.Join(missing, " and "), action, id))
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
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch action {
	case "list":
		page, err := c.List(ctx, jobs.ListParams{State: generics.JobState(*state), Kind: *kind, Queue: *queue, ErrorCode: *code, Tags: tags, AfterID: *after, Limit: *limit})
		if err != nil {
			return exitCode(e, prefix, err)
		}
		if *asJSON {
			return printJSON(e, prefix, jsonPageOf(page))
		}
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tPRIO\tATTEMPTS\tRUN_AT\tLAST_ERROR")
		for _, j := range page.Jobs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d/%d\t%s\t%s\n", j.ID, esc(j.Queue), esc(j.Kind), esc(string(j.State)), j.Priority,
				j.Attempt, j.MaxAttempts, j.RunAt.Format(time.RFC3339), lastErrorColumn(j))
		}
		if page.NextAfterID != 0 {
			fmt.Fprintf(tw, "(more: -after %d)\n", page.NextAfterID)
		}
	case "get":
		j, err := c.Get(ctx, id)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		timeout, err := c.AttemptTimeout(ctx, j)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		if *asJSON {
			jj := jsonJobOf(j)
			if timeout > 0 {
				sec := timeout.Seconds()
				jj.TimeoutSeconds = &sec
			}
			return printJSON(e, prefix, jj)
		}
		fmt.Fprintf(tw, "id\t%d\nqueue\t%s\nkind\t%s (payload v%d)\nstate\t%s\npriority\t%d\nattempts\t%d/%d\ngeneration\t%d\nrun_at\t%s\nlease\t%v\npayload\t%s\n",
			j.ID, esc(j.Queue), esc(j.Kind), j.PayloadVersion, esc(string(j.State)), j.Priority, j.Attempt, j.MaxAttempts, j.Generation,
			j.RunAt.Format(time.RFC3339Nano), j.Lease, escBytes(j.Payload))
		if len(j.Metadata) > 0 {
			kv := make([]string, 0, len(j.Metadata))
			for k, v := range j.Metadata {
				kv = append(kv, esc(k)+"="+esc(v))
			}
			sort.Strings(kv)
			fmt.Fprintf(tw, "metadata\t%s\n", strings.Join(kv, " "))
		}
		if j.LockedBy != "" {
			fmt.Fprintf(tw, "locked_by\t%s\n", esc(j.LockedBy))
		}
		if j.LockedUntil != nil {
			fmt.Fprintf(tw, "locked_until\t%s\n", j.LockedUntil.Format(time.RFC3339Nano))
		}
		if len(j.Tags) > 0 {
			fmt.Fprintf(tw, "tags\t%s\n", esc(strings.Join(j.Tags, " ")))
		}
		if j.UniqueKey != nil {
			fmt.Fprintf(tw, "unique\tkey %x held while %v\n", j.UniqueKey, j.UniqueStates)
		}
		if j.Snoozes > 0 {
			fmt.Fprintf(tw, "snoozes\t%d\n", j.Snoozes)
		}
		printFlowLines(tw, j)
		fmt.Fprintf(tw, "created\t%s\n", j.CreatedAt.Format(time.RFC3339Nano))
		if j.AttemptedAt != nil {
			fmt.Fprintf(tw, "attempted\t%s\n", j.AttemptedAt.Format(time.RFC3339Nano))
		}
		if j.FinishedAt != nil {
			fmt.Fprintf(tw, "finished\t%s\n", j.FinishedAt.Format(time.RFC3339Nano))
		}
		if d, ok := attemptElapsed(j, time.Now()); ok {
			what := "last attempt ran"
			if j.State == generics.JobStateRunning {
				what = "running for"
			}
			tmo := "unknown (no live worker publishes the kind)"
			if timeout > 0 {
				tmo = timeout.String()
			}
			fmt.Fprintf(tw, "elapsed\t%s %v, timeout %s\n", what, d.Round(time.Millisecond), tmo)
		}
		if p := j.Progress; p != nil {
			fmt.Fprintf(tw, "progress\t%s\n", progressLine(p))
		}
		if j.Output != nil {
			fmt.Fprintf(tw, "output\t%s\n", escBytes(j.Output))
		}
		if j.State == generics.JobStateSucceeded && j.LastErrorCode != "" {
			// The history is of earlier attempts: the job itself succeeded.
			fmt.Fprintf(tw, "note\tsucceeded at attempt %d; the errors below are earlier attempts'\n", j.Attempt)
		}
		for _, h := range j.Errors {
			fmt.Fprintf(tw, "error\tattempt %d gen %d %s at %s: %s\n", h.Attempt, h.Generation, esc(h.Code), h.At.Format(time.RFC3339), esc(h.Message))
			if h.Progress != nil {
				fmt.Fprintf(tw, "\t  progress %s\n", progressLine(h.Progress))
			}
			if h.Output != nil {
				fmt.Fprintf(tw, "\t  output %s\n", escBytes(h.Output))
			}
		}
	case "stats":
		s, err := c.Stats(ctx, *window)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		unserved := unservedQueues(s, *unservedAfter)
		if *asJSON {
			return printJSON(e, prefix, jsonStatsOf(s, unserved))
		}
		flagged := map[string]bool{}
		for _, u := range unserved {
			flagged[u.Queue] = true
		}
		fmt.Fprintln(tw, "QUEUE\tPRIO\tREADY\tSCHEDULED\tRUNNING\tDEAD\tOLDEST_READY\tWAIT_P50\tWAIT_P95\tWAIT_P99\tFINISHED\tSERVED\tNO_WORKER\t")
		for _, b := range s.Bands {
			note := ""
			if flagged[b.Queue] && b.Ready > 0 {
				note = "UNSERVED?"
			}
			served := "no"
			if b.QueueServed {
				served = "yes"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%v\t%v\t%v\t%v\t%d\t%s\t%d\t%s\n", esc(b.Queue), b.Priority, b.Ready, b.Scheduled, b.Running, b.Dead,
				b.OldestReadyAge.Round(time.Millisecond), b.WaitP50.Round(time.Millisecond), b.WaitP95.Round(time.Millisecond),
				b.WaitP99.Round(time.Millisecond), b.Finished, served, b.Unserved, note)
		}
		if len(s.DeleteOnSuccess) > 0 {
			// Their succeeded jobs leave no row: FINISHED (read from the table) counts none.
			fmt.Fprintln(tw, "\nDELETES ON SUCCESS\tNOTE")
			for _, k := range s.DeleteOnSuccess {
				fmt.Fprintf(tw, "%s\tdeletes on success: its succeeded jobs leave no row and are not counted above\n", esc(k))
			}
		}
		if len(s.Unserved) > 0 {
			fmt.Fprintln(tw, "\nNO LIVE WORKER\tKIND\tREADY\tWHY")
			for _, u := range s.Unserved {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", esc(u.Queue), esc(u.Kind), u.Ready, unservedWhy(u))
			}
		}
		if len(s.TopDeadCodes) > 0 {
			fmt.Fprintln(tw, "\nDEAD BY CODE\tKIND\tQUEUE\tJOBS")
			for _, d := range s.TopDeadCodes {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", esc(d.Code), esc(d.Kind), esc(d.Queue), d.Jobs)
			}
		}
		tw.Flush()
		for _, u := range unserved {
			fmt.Fprintf(e.stderr, "warning: queue \"%s\": %d ready jobs, the oldest waiting %v, none running: is any worker serving it? (worker.Config.Queues)\n",
				esc(u.Queue), u.Ready, u.OldestReadyAge.Round(time.Second))
		}
		for _, u := range s.Unserved {
			fmt.Fprintf(e.stderr, "warning: queue \"%s\", kind \"%s\": %d ready jobs no live worker can run: %s\n",
				esc(u.Queue), esc(u.Kind), u.Ready, unservedWhy(u))
		}
	case "cancel":
		out, err := c.Cancel(ctx, id, act)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		fmt.Fprintf(tw, "job %d: %s\n", id, esc(string(out)))
	case "retry":
		j, err := c.Retry(ctx, id, act)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		fmt.Fprintf(tw, "job %d: %s, due now, attempts %d/%d\n", j.ID, esc(string(j.State)), j.Attempt, j.MaxAttempts)
	case "reinject":
		j, err := c.Reinject(ctx, id, act, &jobs.ReinjectOpts{MaxAttempts: *maxAttempts})
		if err != nil {
			return exitCode(e, prefix, err)
		}
		fmt.Fprintf(tw, "job %d: %s, attempts 0/%d\n", j.ID, esc(string(j.State)), j.MaxAttempts)
	case "delete":
		if err := c.Delete(ctx, id, act); err != nil {
			return exitCode(e, prefix, err)
		}
		fmt.Fprintf(tw, "job %d: deleted\n", id)
	case "audit":
		entries, err := c.Audit(ctx, id, *after, *limit)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		fmt.Fprintln(tw, "ID\tAT\tACTOR\tACTION\tJOB\tREASON\tDETAIL")
		for _, a := range entries {
			job := "-"
			if a.JobID != nil {
				job = strconv.FormatInt(*a.JobID, 10)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.At.Format(time.RFC3339), esc(a.Actor), esc(a.Action), job, esc(a.Reason), escBytes(a.Detail))
		}
	}
	return exitOK
}

// unservedWhy says why no live worker can run u's jobs.
func unservedWhy(u jobs.UnservedJobs) string {
	switch {
	case !u.QueueServed && !u.KindRegistered:
		return "no live worker serves the queue or registers the kind"
	case !u.QueueServed:
		return "no live worker serves the queue"
	case !u.KindRegistered:
		return "no live worker registers the kind"
	default:
		return "the workers that serve the queue do not register the kind"
	}
}

// unservedQueue is a queue that looks served by no worker.
type unservedQueue struct {
	Queue          string
	Ready          int64
	OldestReadyAge time.Duration
}

// unservedQueues flags the queues with ready jobs, none running, and the oldest ready job
// older than after. There is no worker registry to ask, so this is a heuristic: a queue whose
// workers are all busy elsewhere, or stopped for a deploy, shows the same signs.
func unservedQueues(s *jobs.Stats, after time.Duration) []unservedQueue {
	type agg struct {
		ready, running int64
		oldest         time.Duration
	}
	byQueue := map[string]*agg{}
	var names []string
	for _, b := range s.Bands {
		a := byQueue[b.Queue]
		if a == nil {
			a = &agg{}
			byQueue[b.Queue] = a
			names = append(names, b.Queue)
		}
		a.ready += b.Ready
		a.running += b.Running
		a.oldest = max(a.oldest, b.OldestReadyAge)
	}
	sort.Strings(names)
	var out []unservedQueue
	for _, n := range names {
		a := byQueue[n]
		if a.ready > 0 && a.running == 0 && a.oldest >= after {
			out = append(out, unservedQueue{Queue: n, Ready: a.ready, OldestReadyAge: a.oldest})
		}
	}
	return out
}

// printJSON writes v as indented JSON.
func printJSON(e *env, prefix string, v any) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return exitCode(e, prefix, err)
	}
	return exitOK
}

// progressLine renders a progress: "done of total (pct%): msg, reported at".
func progressLine(p *generics.Progress) string {
	s := strconv.FormatInt(p.Done, 10)
	if p.Total > 0 {
		s += fmt.Sprintf(" of %d (%d%%)", p.Total, p.Done*100/p.Total)
	}
	if p.Msg != "" {
		s += ": " + esc(p.Msg)
	}
	return s + ", reported " + p.At.UTC().Format(time.RFC3339)
}

// lastErrorColumn is a job's LAST_ERROR in lists: a succeeded job's code is an earlier
// attempt's, and says so.
func lastErrorColumn(j *generics.JobRow) string {
	if j.State == generics.JobStateSucceeded && j.LastErrorCode != "" {
		return "(earlier " + esc(j.LastErrorCode) + ")"
	}
	return esc(j.LastErrorCode)
}
