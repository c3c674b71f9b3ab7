package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
)

// Workflows (docs/guide.md, "Workflows"): a set of tasks, each a job, some of which wait for
// others. A task with dependencies is inserted in state waiting (generics.JobStateWaiting):
// never claimed, outside the claim's index. The fenced finish of its last dependency releases
// it (waiting -> ready) in the finish's own transaction (the trigger jobs_settle_dependents,
// migration 0020), so no release is ever lost or made twice, and a finish that is rolled back
// or rejected as stale releases nothing.

// ErrInvalidWorkflow means a workflow cannot be inserted as built: a task name that is empty,
// too long or repeated, a dependency on a task it does not have, a cycle, a task option that
// workflows do not support, or no task at all. Nothing was written. The error is a
// *WorkflowError naming the task.
var ErrInvalidWorkflow = errors.New("tenure: invalid workflow")

// ErrUnknownDependency means a task depends on a name the workflow has no task for. It is
// returned wrapped in a *WorkflowError (errors.Is ErrInvalidWorkflow too).
var ErrUnknownDependency = errors.New("tenure: workflow task depends on an unknown task")

// ErrWorkflowCycle means the workflow's dependencies form a cycle; WorkflowError.Cycle lists
// it. It is returned wrapped in a *WorkflowError (errors.Is ErrInvalidWorkflow too).
var ErrWorkflowCycle = errors.New("tenure: workflow dependencies form a cycle")

// ErrWorkflowNotFound means no job belongs to the given workflow id.
var ErrWorkflowNotFound = errors.New("tenure: workflow not found")

// ErrWorkflowExists means a workflow with the same id (WorkflowOpts.ID) was inserted before
// and has not been pruned: nothing of the second one was inserted. It is returned wrapped in
// a *WorkflowExistsError naming the id. A caller that chooses workflow ids can treat it as
// "already done" when retrying an insert whose outcome it did not learn.
var ErrWorkflowExists = errors.New("tenure: a workflow with this id exists")

// WorkflowExistsError reports a workflow refused because its id is taken (ErrWorkflowExists).
type WorkflowExistsError struct {
	ID       uuid.UUID // the id taken
	Workflow string    // the refused workflow's name
}

func (e *WorkflowExistsError) Error() string {
	return fmt.Sprintf("%v: workflow %q, id %s", ErrWorkflowExists, e.Workflow, e.ID)
}

// Unwrap returns ErrWorkflowExists.
func (e *WorkflowExistsError) Unwrap() error { return ErrWorkflowExists }

// WorkflowError reports why a workflow was refused.
type WorkflowError struct {
	Workflow string   // the workflow's name
	Task     string   // the task at fault ("" for the workflow as a whole)
	Cycle    []string // for ErrWorkflowCycle: the task names around the cycle, first repeated last
	Err      error    // ErrUnknownDependency, ErrWorkflowCycle, or an *OptionError of the task
	Msg      string
}

func (e *WorkflowError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %q", ErrInvalidWorkflow, e.Workflow)
	if e.Task != "" {
		fmt.Fprintf(&b, ": task %q", e.Task)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Msg != "" {
		fmt.Fprintf(&b, ": %s", e.Msg)
	}
	if len(e.Cycle) > 0 {
		fmt.Fprintf(&b, ": %s", strings.Join(e.Cycle, " -> "))
	}
	return b.String()
}

// Unwrap returns ErrInvalidWorkflow and the cause, so errors.Is matches both.
func (e *WorkflowError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidWorkflow}
	}
	return []error{ErrInvalidWorkflow, e.Err}
}

// OnDependencyFailure says what a dependency that ends dead or cancelled does to a task that
// waits for it.
type OnDependencyFailure string

const (
	// CancelDependents: the waiting task is cancelled (last_error_code DEPENDENCY_FAILED), and
	// so, in turn, are the tasks waiting for it under this policy. The default.
	CancelDependents OnDependencyFailure = "cancel"
	// RunDependents: the dependency counts as resolved; the task runs once all its
	// dependencies are resolved (DependencyOutput tells it which failed).
	RunDependents OnDependencyFailure = "run"
)

func (p OnDependencyFailure) valid() bool {
	return p == "" || p == CancelDependents || p == RunDependents
}

// MaxTaskNameChars bounds a task's name (characters), the database's bound.
const MaxTaskNameChars = generics.MaxNameChars

// WorkflowOpts configure a workflow. The zero value is the defaults.
type WorkflowOpts struct {
	// ID is the workflow's id. Default: a new random (version 4) UUID.
	ID uuid.UUID
	// OnDependencyFailure applies to every task that does not set its own. Default
	// CancelDependents.
	OnDependencyFailure OnDependencyFailure
}

// TaskOpts are a task's options: the job's InsertOpts (Unique and Sequence are not supported
// in a workflow) and its dependencies.
type TaskOpts struct {
	InsertOpts
	// DependsOn names the tasks of the same workflow that must succeed before this one runs
	// (in any order of Add: a later task may be named).
	DependsOn []string
	// OnDependencyFailure overrides the workflow's policy for this task.
	OnDependencyFailure OnDependencyFailure
}

type wfTask struct {
	name string
	args generics.Args
	opts TaskOpts
}

// Workflow is a set of tasks built with Add and inserted, all or nothing, with
// Client.InsertWorkflow or Client.InsertWorkflowTx. It is not safe for concurrent use.
type Workflow struct {
	name  string
	opts  WorkflowOpts
	tasks []wfTask
	index map[string]int
	err   error // the first error of Add, reported by Validate and the inserts
}

// NewWorkflow starts a workflow. name is a label for errors and logs (1..MaxTaskNameChars
// characters, stored in each task's metadata under WorkflowNameMetadata); opts may be nil.
func NewWorkflow(name string, opts *WorkflowOpts) *Workflow {
	w := &Workflow{name: name, index: map[string]int{}}
	if opts != nil {
		w.opts = *opts
	}
	if err := checkTaskName(name); err != nil {
		w.err = &WorkflowError{Workflow: name, Msg: "workflow name: " + err.Error()}
	} else if !w.opts.OnDependencyFailure.valid() {
		w.err = &WorkflowError{Workflow: name, Err: &OptionError{Field: "OnDependencyFailure", Msg: fmt.Sprintf("%q is not a policy", w.opts.OnDependencyFailure)}}
	}
	if w.opts.ID == uuid.Nil {
		w.opts.ID = uuid.New()
	}
	return w
}

// WorkflowNameMetadata is the metadata entry holding a task's workflow name.
const WorkflowNameMetadata = "tenure.workflow"

// ID is the workflow's id (every task's generics.JobRow.WorkflowID).
func (w *Workflow) ID() uuid.UUID { return w.opts.ID }

// Name is the workflow's name.
func (w *Workflow) Name() string { return w.name }

func checkTaskName(name string) error {
	if name == "" || utf8.RuneCountInString(name) > MaxTaskNameChars || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("must be 1..%d characters of valid UTF-8 without NUL", MaxTaskNameChars)
	}
	return nil
}

// Add adds a task named task (unique in the workflow) running args with opts (nil: no
// dependencies, default options) and returns w. A bad name or option is recorded and
// returned by Validate and the inserts (the first one only), as are unknown dependencies and
// cycles, which Add cannot see yet.
func (w *Workflow) Add(task string, args generics.Args, opts *TaskOpts) *Workflow {
	if w.err != nil {
		return w
	}
	var o TaskOpts
	if opts != nil {
		o = *opts
		o.DependsOn = slices.Clone(o.DependsOn)
	}
	fail := func(err error, msg string) *Workflow {
		w.err = &WorkflowError{Workflow: w.name, Task: task, Err: err, Msg: msg}
		return w
	}
	switch {
	case checkTaskName(task) != nil:
		return fail(nil, "task name "+checkTaskName(task).Error())
	case w.index[task] > 0:
		return fail(nil, "added twice")
	case args == nil:
		return fail(&OptionError{Field: "args", Msg: "must not be nil"}, "")
	case o.Unique != nil:
		return fail(&OptionError{Field: "Unique", Msg: "not supported for workflow tasks"}, "")
	case o.Sequence != "":
		return fail(&OptionError{Field: "Sequence", Msg: "not supported for workflow tasks"}, "")
	case !o.OnDependencyFailure.valid():
		return fail(&OptionError{Field: "OnDependencyFailure", Msg: fmt.Sprintf("%q is not a policy", o.OnDependencyFailure)}, "")
	}
	seen := map[string]bool{}
	for _, d := range o.DependsOn {
		if d == task {
			return fail(ErrWorkflowCycle, "depends on itself")
		}
		if seen[d] {
			return fail(nil, fmt.Sprintf("depends on %q twice", d))
		}
		seen[d] = true
	}
	w.tasks = append(w.tasks, wfTask{name: task, args: args, opts: o})
	w.index[task] = len(w.tasks) // 1-based: 0 means absent
	return w
}

// Validate reports the first problem of the workflow as built (a *WorkflowError), or nil:
// Add's errors, dependencies on names the workflow has no task for, cycles. The inserts call
// it first. The task options themselves (args, queue, ...) are checked by the insert, as
// Insert checks them.
func (w *Workflow) Validate() error {
	_, err := w.order()
	return err
}

// order returns the task indexes in a topological order (dependencies first, else in Add
// order), or the workflow's error.
func (w *Workflow) order() ([]int, error) {
	if w.err != nil {
		return nil, w.err
	}
	if len(w.tasks) == 0 {
		return nil, &WorkflowError{Workflow: w.name, Msg: "no task"}
	}
	for _, t := range w.tasks {
		for _, d := range t.opts.DependsOn {
			if w.index[d] == 0 {
				return nil, &WorkflowError{Workflow: w.name, Task: t.name, Err: ErrUnknownDependency, Msg: fmt.Sprintf("%q", d)}
			}
		}
	}
	// Depth-first search in Add order: a task is emitted after its dependencies; meeting a
	// task on the current path is a cycle, reported along the path.
	const (
		unseen = iota
		onPath
		done
	)
	mark := make([]int, len(w.tasks))
	out := make([]int, 0, len(w.tasks))
	var path []int
	var visit func(i int) error
	visit = func(i int) error {
		switch mark[i] {
		case done:
			return nil
		case onPath:
			start := slices.Index(path, i)
			var cycle []string
			for _, k := range path[start:] {
				cycle = append(cycle, w.tasks[k].name)
			}
			cycle = append(cycle, w.tasks[i].name)
			return &WorkflowError{Workflow: w.name, Task: w.tasks[i].name, Err: ErrWorkflowCycle, Cycle: cycle}
		}
		mark[i] = onPath
		path = append(path, i)
		for _, d := range w.tasks[i].opts.DependsOn {
			if err := visit(w.index[d] - 1); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		out = append(out, i)
		return nil
	}
	for i := range w.tasks {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// WorkflowResult is what an insert of a workflow wrote.
type WorkflowResult struct {
	ID uuid.UUID
	// Tasks are the inserted tasks by name: state ready (no dependencies) or waiting.
	Tasks map[string]*generics.JobRow
}

// InsertWorkflow validates the workflow and every task (as Insert does: args, kind
// defaults, options) and inserts all its tasks and their dependencies in one transaction of
// its own. A refused workflow returns a *WorkflowError (errors.Is ErrInvalidWorkflow), the
// task's error wrapped with its name, or, when its id is taken, a *WorkflowExistsError
// (errors.Is ErrWorkflowExists), and writes nothing.
func (c *Client) InsertWorkflow(ctx context.Context, wf *Workflow) (*WorkflowResult, error) {
	var res *WorkflowResult
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		res, err = c.InsertWorkflowTx(ctx, tx, wf)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// InsertWorkflowTx is InsertWorkflow inside the caller's transaction (with its business
// writes): the tasks become visible, and claimable ones are notified, only if tx commits.
// Validation happens before anything is sent, so a refused workflow leaves tx usable; a
// workflow id already taken (WorkflowOpts.ID inserted before: *WorkflowExistsError,
// ErrWorkflowExists) is found by the database's first statement, which fails and leaves tx
// aborted, with nothing of the workflow written. It costs two statements whatever the number
// of tasks (up to 10,000 tasks a statement).
func (c *Client) InsertWorkflowTx(ctx context.Context, tx Tx, wf *Workflow) (*WorkflowResult, error) {
	if tx == nil {
		return nil, &OptionError{Field: "tx", Msg: "must not be nil"}
	}
	if wf == nil {
		return nil, &OptionError{Field: "workflow", Msg: "must not be nil"}
	}
	order, err := wf.order()
	if err != nil {
		return nil, err
	}
	all := make([]prepared, len(order))
	dependents := make([]bool, len(wf.tasks))
	for _, t := range wf.tasks {
		for _, d := range t.opts.DependsOn {
			dependents[wf.index[d]-1] = true
		}
	}
	for k, i := range order {
		t := &wf.tasks[i]
		o := t.opts.InsertOpts
		md := make(map[string]string, len(o.Metadata)+1)
		for key, v := range o.Metadata {
			md[key] = v
		}
		md[WorkflowNameMetadata] = wf.name
		o.Metadata = md
		p, err := c.prepare(ctx, t.args, &o)
		if err != nil {
			return nil, fmt.Errorf("tenure: workflow %q: task %q: %w", wf.name, t.name, err)
		}
		all[k] = p
	}
	q := c.qtx(tx)
	byName := make(map[string]int64, len(order))
	res := &WorkflowResult{ID: wf.opts.ID, Tasks: make(map[string]*generics.JobRow, len(order))}
	for start := 0; start < len(order); start += insertChunk {
		end := min(start+insertChunk, len(order))
		idx := make([]int, 0, end-start)
		for k := start; k < end; k++ {
			idx = append(idx, k)
		}
		a, err := buildManyArgs(all, idx)
		if err != nil {
			return nil, err
		}
		n := len(idx)
		arg := gen.InsertFlowJobsParams{Queues: a.queues, Kinds: a.kinds, Payloads: a.payloads,
			PayloadVersions: a.versions, Priorities: a.priorities, RunAtUs: a.runAtUs, DelayUs: a.delayUs,
			MaxAttempts: a.maxAttempts, LeaseMs: a.leases, Metadata: a.metadata, Tags: a.tags,
			States: make([]string, n), DepsPending: make([]int32, n), HasDependents: make([]bool, n),
			WorkflowIds: make([]uuid.UUID, n), TaskNames: make([]string, n), SequenceKeys: make([]string, n)}
		for j, k := range idx {
			t := &wf.tasks[order[k]]
			arg.States[j] = string(generics.JobStateReady)
			if len(t.opts.DependsOn) > 0 {
				arg.States[j] = string(generics.JobStateWaiting)
			}
			arg.DepsPending[j] = int32(len(t.opts.DependsOn))
			arg.HasDependents[j] = dependents[order[k]]
			arg.WorkflowIds[j] = wf.opts.ID
			arg.TaskNames[j] = t.name
		}
		if start == 0 {
			arg.NewWorkflowID = wf.opts.ID // the first statement takes the id (tenure.workflows)
		}
		got, err := q.InsertFlowJobs(ctx, arg)
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "workflows_pkey" {
				return nil, &WorkflowExistsError{ID: wf.opts.ID, Workflow: wf.name}
			}
			return nil, migrations.WrapNotMigrated(fmt.Errorf("tenure: insert workflow %q: %w", wf.name, err))
		}
		if len(got) != n {
			return nil, fmt.Errorf("tenure: insert workflow %q: %d rows inserted, %d expected", wf.name, len(got), n)
		}
		for j, k := range idx {
			r, err := rowFromGen(gen.TenureJob(*got[j]))
			if err != nil {
				return nil, err
			}
			name := wf.tasks[order[k]].name
			byName[name] = r.ID
			res.Tasks[name] = r
		}
	}
	var deps gen.InsertDepsParams
	for _, i := range order {
		t := &wf.tasks[i]
		pol := t.opts.OnDependencyFailure
		if pol == "" {
			pol = wf.opts.OnDependencyFailure
		}
		if pol == "" {
			pol = CancelDependents
		}
		for _, d := range t.opts.DependsOn {
			deps.DepIds = append(deps.DepIds, byName[d])
			deps.JobIds = append(deps.JobIds, byName[t.name])
			deps.OnFailure = append(deps.OnFailure, string(pol))
		}
	}
	if len(deps.DepIds) > 0 {
		if err := q.InsertDeps(ctx, deps); err != nil {
			return nil, fmt.Errorf("tenure: insert workflow %q: dependencies: %w", wf.name, err)
		}
	}
	return res, nil
}

// WorkflowEdge is one dependency of a workflow: JobID waits for DepID.
type WorkflowEdge struct {
	DepID, JobID int64
	// OnFailure is the waiting task's policy: "cancel", "run" (or "block" for sequences).
	OnFailure string
	// Resolved: the dependency's final state has been counted.
	Resolved bool
}

// WorkflowView is a workflow as stored: its tasks in insertion order (dependencies first)
// and the edges between them.
type WorkflowView struct {
	ID    uuid.UUID
	Tasks []*generics.JobRow
	Edges []WorkflowEdge
}

// Workflow reads a workflow's tasks and edges, or returns ErrWorkflowNotFound.
func (c *Client) Workflow(ctx context.Context, id uuid.UUID) (*WorkflowView, error) {
	rows, err := c.q.WorkflowJobs(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrWorkflowNotFound, id)
	}
	v := &WorkflowView{ID: id}
	for _, j := range rows {
		r, err := rowFromGen(*j)
		if err != nil {
			return nil, err
		}
		v.Tasks = append(v.Tasks, r)
	}
	edges, err := c.q.WorkflowEdges(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, e := range edges {
		v.Edges = append(v.Edges, WorkflowEdge{DepID: e.DepID, JobID: e.JobID, OnFailure: e.OnFailure, Resolved: e.Resolved})
	}
	return v, nil
}

// WorkflowCancelResult says what CancelWorkflow did.
type WorkflowCancelResult struct {
	// Cancelled: tasks that had not started (ready or waiting), cancelled at once.
	Cancelled []int64
	// Requested: running tasks whose owners were asked to cancel them (their handler's
	// context is cancelled with worker.ErrJobCancelled; they end cancelled).
	Requested []int64
}

// CancelWorkflow cancels every task of workflow id that has not run yet and asks the owners
// of its running tasks to cancel them (NOTIFY, at the latest on their next heartbeat), in one
// transaction with one audit entry (action "cancel", the workflow id and the task ids in its
// detail). Finished tasks are left as they are. A workflow with no task returns
// ErrWorkflowNotFound.
func (c *Client) CancelWorkflow(ctx context.Context, id uuid.UUID, act Action) (*WorkflowCancelResult, error) {
	if err := act.check(); err != nil {
		return nil, err
	}
	out := &WorkflowCancelResult{}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.qtx(tx)
		var err error
		if out.Cancelled, err = q.CancelWorkflowPending(ctx, id); err != nil {
			return err
		}
		if out.Requested, err = q.RequestCancelWorkflow(ctx, id); err != nil {
			return err
		}
		if len(out.Cancelled) == 0 && len(out.Requested) == 0 {
			rows, err := q.WorkflowJobs(ctx, id)
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				return fmt.Errorf("%w: %s", ErrWorkflowNotFound, id)
			}
		}
		for _, jid := range out.Requested {
			if err := q.NotifyCancel(ctx, jid); err != nil {
				return err
			}
		}
		// The done signal for the tasks cancelled before they ran (Wait), 350 ids a message
		// as the finishes send it; the trigger sends it for the dependents it cancels.
		for i := 0; i < len(out.Cancelled); i += 350 {
			ids := make([]string, 0, 350)
			for _, jid := range out.Cancelled[i:min(i+350, len(out.Cancelled))] {
				ids = append(ids, strconv.FormatInt(jid, 10))
			}
			if err := q.NotifyDone(ctx, strings.Join(ids, ",")); err != nil {
				return err
			}
		}
		return audit(ctx, q, act, "cancel", nil, map[string]any{
			"workflow_id": id, "cancelled": out.Cancelled, "cancel_requested": out.Requested})
	})
	if err != nil {
		return nil, err
	}
	c.log.InfoContext(ctx, "tenure: workflow cancel", "workflow_id", id.String(), "cancelled", len(out.Cancelled),
		"cancel_requested", len(out.Requested), "actor", act.Actor, "reason", act.Reason)
	return out, nil
}

// insertSequenced inserts one job of a sequence, inside the transaction q runs in: it takes
// the key (SequencePrev locks its row and the job inserted before it), inserts the job
// waiting for that job when it may still run (or ended dead or cancelled under
// SequenceBlock), else ready, and records it as the key's last job. Every sequence job is
// inserted has_dependents: the job inserted after it, in a later transaction, needs its
// finish to fire the release (the trigger then costs its finish ~0.1 ms, even with none).
func (c *Client) insertSequenced(ctx context.Context, q *gen.Queries, p prepared) (*InsertResult, error) {
	prev, err := q.SequencePrev(ctx, gen.SequencePrevParams{Key: p.sequence, OnFailure: p.seqOnFail})
	if err != nil {
		return nil, migrations.WrapNotMigrated(fmt.Errorf("tenure: insert %s: sequence %q: %w", p.kind, truncate(p.sequence), err))
	}
	a, err := buildManyArgs([]prepared{p}, []int{0})
	if err != nil {
		return nil, err
	}
	state, pending := string(generics.JobStateReady), int32(0)
	if prev != 0 {
		state, pending = string(generics.JobStateWaiting), 1
	}
	got, err := q.InsertFlowJobs(ctx, gen.InsertFlowJobsParams{Queues: a.queues, Kinds: a.kinds, Payloads: a.payloads,
		PayloadVersions: a.versions, Priorities: a.priorities, RunAtUs: a.runAtUs, DelayUs: a.delayUs,
		MaxAttempts: a.maxAttempts, LeaseMs: a.leases, Metadata: a.metadata, Tags: a.tags,
		States: []string{state}, DepsPending: []int32{pending}, HasDependents: []bool{true}, // its successor, if any
		WorkflowIds: []uuid.UUID{uuid.Nil}, TaskNames: []string{""}, SequenceKeys: []string{p.sequence}})
	if err != nil {
		return nil, migrations.WrapNotMigrated(fmt.Errorf("tenure: insert %s: %w", p.kind, err))
	}
	if len(got) != 1 {
		return nil, fmt.Errorf("tenure: insert %s: %d rows inserted", p.kind, len(got))
	}
	if prev != 0 {
		if err := q.InsertDeps(ctx, gen.InsertDepsParams{DepIds: []int64{prev}, JobIds: []int64{got[0].ID}, OnFailure: []string{p.seqOnFail}}); err != nil {
			return nil, fmt.Errorf("tenure: insert %s: sequence edge: %w", p.kind, err)
		}
	}
	if err := q.SequenceSetLast(ctx, gen.SequenceSetLastParams{JobID: got[0].ID, Key: p.sequence}); err != nil {
		return nil, fmt.Errorf("tenure: insert %s: sequence %q: %w", p.kind, truncate(p.sequence), err)
	}
	r, err := rowFromGen(gen.TenureJob(*got[0]))
	if err != nil {
		return nil, err
	}
	return &InsertResult{Job: r}, nil
}

// insertSequencedMany inserts the sequenced jobs of an InsertMany call (idx, in input order)
// inside the transaction q runs in, as insertSequenced does for one, in a few statements for
// all of them: SequencePrevMany takes each key of the call and finds the job before it (keys in
// sorted order, so two calls taking the same keys take them in the same order and cannot
// deadlock; the policy of a key's first job of the call decides for a dead or cancelled
// previous job, as insertSequenced's); InsertFlowJobs inserts the jobs in input order, each
// waiting for the job of its key before it (the key's previous job for the first of the
// call); InsertDeps writes those edges, and SequenceSetLastMany records each key's last job.
// So the jobs of one key run one at a time in input order, after the jobs of the key inserted
// before the call.
func (c *Client) insertSequencedMany(ctx context.Context, q *gen.Queries, all []prepared, idx []int, res []*InsertResult) error {
	firstPolicy := map[string]string{}
	var keys []string
	for _, k := range idx {
		p := &all[k]
		if _, ok := firstPolicy[p.sequence]; !ok {
			firstPolicy[p.sequence] = p.seqOnFail
			keys = append(keys, p.sequence)
		}
	}
	slices.Sort(keys)
	policies := make([]string, len(keys))
	for i, k := range keys {
		policies[i] = firstPolicy[k]
	}
	prevs, err := q.SequencePrevMany(ctx, gen.SequencePrevManyParams{Keys: keys, OnFailure: policies})
	if err != nil {
		return migrations.WrapNotMigrated(fmt.Errorf("tenure: insert many: sequences: %w", err))
	}
	if len(prevs) != len(keys) {
		return fmt.Errorf("tenure: insert many: %d sequences taken, %d expected", len(prevs), len(keys))
	}
	last := make(map[string]int64, len(keys)) // the job the key's next job waits for (0: none)
	for _, r := range prevs {
		last[r.Key] = r.Prev
	}
	for start := 0; start < len(idx); start += insertChunk {
		chunk := idx[start:min(start+insertChunk, len(idx))]
		a, err := buildManyArgs(all, chunk)
		if err != nil {
			return err
		}
		n := len(chunk)
		states, pending, hasDeps := make([]string, n), make([]int32, n), make([]bool, n)
		wfIDs, names, seqKeys := make([]uuid.UUID, n), make([]string, n), make([]string, n)
		waits := make(map[string]bool, len(keys)) // a job of the key comes before, in this chunk
		for i, k := range chunk {
			key := all[k].sequence
			states[i], hasDeps[i], seqKeys[i] = string(generics.JobStateReady), true, key // its successor, if any
			if last[key] != 0 || waits[key] {
				states[i], pending[i] = string(generics.JobStateWaiting), 1
			}
			waits[key] = true
		}
		got, err := q.InsertFlowJobs(ctx, gen.InsertFlowJobsParams{Queues: a.queues, Kinds: a.kinds, Payloads: a.payloads,
			PayloadVersions: a.versions, Priorities: a.priorities, RunAtUs: a.runAtUs, DelayUs: a.delayUs,
			MaxAttempts: a.maxAttempts, LeaseMs: a.leases, Metadata: a.metadata, Tags: a.tags,
			States: states, DepsPending: pending, HasDependents: hasDeps,
			WorkflowIds: wfIDs, TaskNames: names, SequenceKeys: seqKeys})
		if err != nil {
			return migrations.WrapNotMigrated(fmt.Errorf("tenure: insert many: %w", err))
		}
		if len(got) != n {
			return fmt.Errorf("tenure: insert many: %d rows inserted, %d expected", len(got), n)
		}
		var deps gen.InsertDepsParams
		for i, k := range chunk {
			p := &all[k]
			if prev := last[p.sequence]; prev != 0 {
				deps.DepIds, deps.JobIds = append(deps.DepIds, prev), append(deps.JobIds, got[i].ID)
				deps.OnFailure = append(deps.OnFailure, p.seqOnFail)
			}
			last[p.sequence] = got[i].ID
			r, err := rowFromGen(gen.TenureJob(*got[i]))
			if err != nil {
				return err
			}
			res[k] = &InsertResult{Job: r}
		}
		if len(deps.DepIds) > 0 {
			if err := q.InsertDeps(ctx, deps); err != nil {
				return fmt.Errorf("tenure: insert many: sequence edges: %w", err)
			}
		}
	}
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = last[k]
	}
	if err := q.SequenceSetLastMany(ctx, gen.SequenceSetLastManyParams{Keys: keys, JobIds: ids}); err != nil {
		return fmt.Errorf("tenure: insert many: sequences: %w", err)
	}
	return nil
}
