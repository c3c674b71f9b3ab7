package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

func init() {
	register(&command{
		name:    "workflow",
		summary: "inspect a workflow (its tasks by depth, their states, what waits on what) or cancel it",
		run:     runWorkflow,
	})
}

const workflowUsage = `Usage: tenure workflow <action> [flags] <workflow id>

  get ID     the workflow's tasks by depth (a task's depth is 1 + the deepest of its
             dependencies), each with its job id, kind, state and attempts, the tasks it
             depends on and, while it waits, those that have not resolved yet (-json)
  cancel ID  cancel every task that has not run yet and ask the workers of running ones
             to cancel them; finished tasks are left as they are. Audited: -actor (who)
             and -reason (why) are required.

The workflow id is the UUID of jobs.Workflow.ID: tenure jobs get ID shows it for a task
(workflow_id in -json).`

// printFlowLines adds a job's workflow and sequence to tenure jobs get.
func printFlowLines(w io.Writer, j *generics.JobRow) {
	if j.WorkflowID != nil {
		fmt.Fprintf(w, "workflow\t%s task %s (tenure workflow get %s)\n", j.WorkflowID, esc(j.TaskName), j.WorkflowID)
	}
	if j.SequenceKey != "" {
		fmt.Fprintf(w, "sequence\t%s\n", esc(j.SequenceKey))
	}
	if j.State == generics.JobStateWaiting {
		fmt.Fprintf(w, "waiting\ton %d unresolved dependencies\n", j.DepsPending)
	}
}

func runWorkflow(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintln(e.stdout, workflowUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	action := args[0]
	if action != "get" && action != "cancel" {
		return exitCode(e, "tenure workflow", usageErrorf("unknown action %q (get, cancel; see tenure workflow -h)", action))
	}
	prefix := "tenure workflow " + action
	fs := newFlagSet(e, "workflow "+action, workflowUsage)
	dbURL := databaseFlag(fs)
	asJSON := fs.Bool("json", false, "(get) print JSON instead of a table")
	actor := fs.String("actor", "", "(cancel) who acts, for the audit trail")
	reason := fs.String("reason", "", "(cancel) why, for the audit trail")
	if code, done := parseFlags(e, fs, args[1:]); done {
		return code
	}
	if fs.NArg() == 0 {
		return exitCode(e, prefix, usageErrorf("missing workflow id"))
	}
	id, err := uuid.Parse(fs.Arg(0))
	if err != nil {
		return exitCode(e, prefix, usageErrorf("workflow id must be a UUID, got %q", fs.Arg(0)))
	}
	if code, done := parseFlags(e, fs, fs.Args()[1:]); done { // flags after the id
		return code
	}
	if fs.NArg() > 0 {
		return exitCode(e, prefix, usageErrorf("unexpected arguments %q", fs.Args()))
	}
	if action == "cancel" {
		var missing []string
		if *actor == "" {
			missing = append(missing, "-actor (who acts)")
		}
		if *reason == "" {
			missing = append(missing, "-reason (why)")
		}
		if len(missing) > 0 {
			return exitCode(e, prefix, usageErrorf("cancel is audited: %s required, e.g. tenure workflow cancel %s -actor ops@example.com -reason \"...\"",
				strings.Join(missing, " and "), id))
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
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch action {
	case "get":
		v, err := c.Workflow(ctx, id)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		wv := workflowViewOf(v)
		if *asJSON {
			return printJSON(e, prefix, wv)
		}
		fmt.Fprintf(tw, "workflow\t%s\n", wv.ID)
		if wv.Name != "" {
			fmt.Fprintf(tw, "name\t%s\n", esc(wv.Name))
		}
		fmt.Fprintf(tw, "tasks\t%d (%s)\n\n", len(wv.Tasks), stateCounts(wv.States))
		fmt.Fprintln(tw, "DEPTH\tTASK\tID\tKIND\tSTATE\tATTEMPTS\tDEPENDS_ON\tWAITING_ON")
		for _, t := range wv.Tasks {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%d/%d\t%s\t%s\n", t.Depth, esc(t.Task), t.ID, esc(t.Kind), esc(t.State),
				t.Attempts, t.MaxAttempts, namesOrDash(t.DependsOn), namesOrDash(t.WaitingOn))
		}
	case "cancel":
		out, err := c.CancelWorkflow(ctx, id, jobs.Action{Actor: *actor, Reason: *reason})
		if err != nil {
			return exitCode(e, prefix, err)
		}
		fmt.Fprintf(tw, "workflow %s: %d tasks cancelled, %d running asked to cancel\n", id, len(out.Cancelled), len(out.Requested))
	}
	return exitOK
}

func namesOrDash(names []string) string {
	if len(names) == 0 {
		return "-"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = esc(n)
	}
	return strings.Join(q, ",")
}

func stateCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", esc(k), m[k]))
	}
	return strings.Join(parts, ", ")
}

// jsonWorkflow is `tenure workflow get -json`.
type jsonWorkflow struct {
	ID     string         `json:"id"`
	Name   string         `json:"name,omitempty"`
	States map[string]int `json:"states"`
	Tasks  []jsonTask     `json:"tasks"`
	Edges  []jsonEdge     `json:"edges"`
}

type jsonTask struct {
	Task        string          `json:"task"`
	ID          int64           `json:"id"`
	Depth       int             `json:"depth"`
	Kind        string          `json:"kind"`
	Queue       string          `json:"queue"`
	State       string          `json:"state"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	DepsPending int             `json:"deps_pending"`
	DependsOn   []string        `json:"depends_on"`
	WaitingOn   []string        `json:"waiting_on"`
	RunAt       time.Time       `json:"run_at"`
	AttemptedAt *time.Time      `json:"attempted_at"`
	FinishedAt  *time.Time      `json:"finished_at"`
	LastError   *string         `json:"last_error_code"`
	Output      json.RawMessage `json:"output"`
}

type jsonEdge struct {
	DepID     int64  `json:"dep_id"`
	JobID     int64  `json:"job_id"`
	OnFailure string `json:"on_failure"`
	Resolved  bool   `json:"resolved"`
}

// workflowViewOf lays a workflow out by depth: a task without dependencies has depth 0,
// any other 1 + the deepest of its dependencies. Tasks are sorted by depth, then id.
func workflowViewOf(v *jobs.WorkflowView) jsonWorkflow {
	out := jsonWorkflow{ID: v.ID.String(), States: map[string]int{}, Tasks: []jsonTask{}, Edges: []jsonEdge{}}
	byID := make(map[int64]*generics.JobRow, len(v.Tasks))
	for _, t := range v.Tasks {
		byID[t.ID] = t
		out.States[string(t.State)]++
		if out.Name == "" {
			out.Name = t.Metadata[jobs.WorkflowNameMetadata]
		}
	}
	deps := map[int64][]jobs.WorkflowEdge{}
	for _, e := range v.Edges {
		deps[e.JobID] = append(deps[e.JobID], e)
		out.Edges = append(out.Edges, jsonEdge{DepID: e.DepID, JobID: e.JobID, OnFailure: e.OnFailure, Resolved: e.Resolved})
	}
	depth := make(map[int64]int, len(v.Tasks))
	var depthOf func(id int64, seen map[int64]bool) int
	depthOf = func(id int64, seen map[int64]bool) int {
		if d, ok := depth[id]; ok {
			return d
		}
		if seen[id] { // a cycle cannot be built; never loop on a hand-edited table
			return 0
		}
		seen[id] = true
		d := 0
		for _, e := range deps[id] {
			if _, ok := byID[e.DepID]; ok {
				d = max(d, depthOf(e.DepID, seen)+1)
			}
		}
		depth[id] = d
		return d
	}
	name := func(id int64) string {
		if t, ok := byID[id]; ok && t.TaskName != "" {
			return t.TaskName
		}
		return fmt.Sprintf("#%d", id)
	}
	for _, t := range v.Tasks {
		jt := jsonTask{Task: t.TaskName, ID: t.ID, Depth: depthOf(t.ID, map[int64]bool{}), Kind: t.Kind, Queue: t.Queue,
			State: string(t.State), Attempts: t.Attempt, MaxAttempts: t.MaxAttempts, DepsPending: t.DepsPending,
			DependsOn: []string{}, WaitingOn: []string{}, RunAt: t.RunAt.UTC(), AttemptedAt: utcPtr(t.AttemptedAt),
			FinishedAt: utcPtr(t.FinishedAt), LastError: strPtr(t.LastErrorCode), Output: t.Output}
		if len(jt.Output) == 0 {
			jt.Output = json.RawMessage("null")
		}
		for _, e := range deps[t.ID] {
			jt.DependsOn = append(jt.DependsOn, name(e.DepID))
			if !e.Resolved && t.State == generics.JobStateWaiting {
				jt.WaitingOn = append(jt.WaitingOn, name(e.DepID))
			}
		}
		out.Tasks = append(out.Tasks, jt)
	}
	sort.SliceStable(out.Tasks, func(i, j int) bool {
		if out.Tasks[i].Depth != out.Tasks[j].Depth {
			return out.Tasks[i].Depth < out.Tasks[j].Depth
		}
		return out.Tasks[i].ID < out.Tasks[j].ID
	})
	return out
}
