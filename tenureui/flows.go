package tenureui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/tenureui/internal/uidb"
)

// Workflows and sequences (issue 30): the workflow view (GET /workflows/{id}: the tasks in
// layers by depth, each with its state and what it still waits on), the sequence view (GET
// /sequences?key=K: the jobs not finished yet, in order, the first running, next or holding the
// sequence), and the job page's links to them.

const (
	// workflowTasksShown bounds the tasks the workflow view reads and shows (a workflow can
	// hold 100,000 tasks); `tenure workflow get -json` lists them all.
	workflowTasksShown = 1000
	// workflowEdgesShown bounds the dependencies read for those tasks.
	workflowEdgesShown = 5000
	// sequenceJobsShown bounds the unfinished jobs the sequence view shows.
	sequenceJobsShown = 200
)

// jobFlow is the job page's workflow and sequence line (nil when the job is in neither).
type jobFlow struct {
	WorkflowID  string
	TaskName    string
	SequenceKey string
	DepsPending int32
	Waiting     bool
}

// readJobFlow reads the job's workflow and sequence, inside the job page's read.
func readJobFlow(ctx context.Context, q *uidb.Queries, id int64, state uidb.TenureJobState) (*jobFlow, error) {
	f, err := q.UIJobFlow(ctx, id)
	if err != nil || (f.WorkflowID == nil && f.SequenceKey == "") {
		return nil, err
	}
	out := &jobFlow{TaskName: f.TaskName, SequenceKey: f.SequenceKey, DepsPending: f.DepsPending, Waiting: state == "waiting"}
	if f.WorkflowID != nil {
		out.WorkflowID = f.WorkflowID.String()
	}
	return out, nil
}

type stateCount struct {
	State string
	Jobs  int64
}

// wfTask is one task of the workflow view.
type wfTask struct {
	uidb.UIWorkflowTasksRow
	Depth int
	// After: every dependency; WaitingOn: those not resolved yet (while the task waits).
	After, WaitingOn []wfRef
}

type wfRef struct {
	ID   int64
	Name string
}

type wfLayer struct {
	Depth int
	Tasks []*wfTask
}

type workflowView struct {
	ID, Name  string
	Total     int64
	States    []stateCount
	Layers    []wfLayer
	Shown     int
	TasksMore bool // more tasks than workflowTasksShown
	EdgesMore bool // more dependencies than workflowEdgesShown: depths may be understated
}

func countStates[R any](rows []R, f func(R) (string, int64)) ([]stateCount, int64) {
	var out []stateCount
	var total int64
	for _, r := range rows {
		s, n := f(r)
		out = append(out, stateCount{s, n})
		total += n
	}
	sort.Slice(out, func(i, j int) bool { return out[i].State < out[j].State })
	return out, total
}

// workflow serves the workflow view: the first workflowTasksShown tasks in insertion order
// (dependencies before dependents, so each shown task's dependencies are shown too), laid out
// by depth (0: no dependency; else 1 + the deepest dependency), with every task's state counted.
func (h *Handler) workflow(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a workflow id (a UUID)", r.PathValue("id")))
		return
	}
	ctx := r.Context()
	v := &workflowView{ID: id.String()}
	var tasks []uidb.UIWorkflowTasksRow
	var edges []uidb.UIWorkflowEdgesRow
	err = h.read(ctx, func(q *uidb.Queries) error {
		states, err := q.UIWorkflowStates(ctx, id)
		if err != nil {
			return err
		}
		v.States, v.Total = countStates(states, func(s uidb.UIWorkflowStatesRow) (string, int64) { return string(s.State), s.Jobs })
		if v.Total == 0 {
			return errWorkflowNotFound
		}
		if tasks, err = q.UIWorkflowTasks(ctx, uidb.UIWorkflowTasksParams{WorkflowID: id, TextChars: textChars, MaxRows: workflowTasksShown + 1}); err != nil {
			return err
		}
		if len(tasks) > workflowTasksShown {
			tasks, v.TasksMore = tasks[:workflowTasksShown], true
		}
		ids := make([]int64, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		edges, err = q.UIWorkflowEdges(ctx, uidb.UIWorkflowEdgesParams{JobIds: ids, MaxRows: workflowEdgesShown + 1})
		return err
	})
	if errors.Is(err, errWorkflowNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("%w: %s", errWorkflowNotFound, id))
		return
	}
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	if len(edges) > workflowEdgesShown {
		edges, v.EdgesMore = edges[:workflowEdgesShown], true
	}
	v.Layers, v.Shown = layOut(tasks, edges)
	if len(tasks) > 0 {
		v.Name = clip(tasks[0].WorkflowName, shownText)
	}
	title := "Workflow " + v.ID
	if v.Name != "" {
		title = "Workflow " + v.Name
	}
	p := h.newPage(w, r, title)
	p.Data = v
	h.render(w, r, http.StatusOK, "workflow", p)
}

var errWorkflowNotFound = errors.New("no job belongs to workflow")

// layOut computes each task's depth from the edges (tasks come in id order, dependencies
// first) and groups them in layers.
func layOut(tasks []uidb.UIWorkflowTasksRow, edges []uidb.UIWorkflowEdgesRow) ([]wfLayer, int) {
	byID := make(map[int64]*wfTask, len(tasks))
	order := make([]*wfTask, 0, len(tasks))
	for _, t := range tasks {
		wt := &wfTask{UIWorkflowTasksRow: t}
		wt.TaskName, wt.Kind, wt.Queue = clip(t.TaskName, shownText), clip(t.Kind, shownText), clip(t.Queue, shownText)
		byID[t.ID] = wt
		order = append(order, wt)
	}
	deps := map[int64][]uidb.UIWorkflowEdgesRow{}
	for _, e := range edges {
		deps[e.JobID] = append(deps[e.JobID], e)
	}
	// Ids ascend along every edge (a task is inserted after its dependencies), so one pass in
	// id order sees each dependency's depth before its dependents'.
	sort.Slice(order, func(i, j int) bool { return order[i].ID < order[j].ID })
	maxDepth := 0
	for _, t := range order {
		for _, e := range deps[t.ID] {
			ref := wfRef{ID: e.DepID, Name: fmt.Sprintf("#%d", e.DepID)}
			if d, ok := byID[e.DepID]; ok {
				ref.Name = d.TaskName
				if d.ID < t.ID {
					t.Depth = max(t.Depth, d.Depth+1)
				}
			}
			t.After = append(t.After, ref)
			if !e.Resolved && t.State == "waiting" {
				t.WaitingOn = append(t.WaitingOn, ref)
			}
		}
		maxDepth = max(maxDepth, t.Depth)
	}
	layers := make([]wfLayer, maxDepth+1)
	for i := range layers {
		layers[i].Depth = i
	}
	for _, t := range order {
		layers[t.Depth].Tasks = append(layers[t.Depth].Tasks, t)
	}
	if len(order) == 0 {
		layers = nil
	}
	return layers, len(order)
}

type sequenceView struct {
	Key    string
	Total  int64
	States []stateCount
	Jobs   []seqJob
	More   bool
}

type seqJob struct {
	uidb.UISequenceJobsRow
	// After is the job this one waits for (0 for the first shown).
	After int64
}

// sequence serves the sequence view of ?key=K.
func (h *Handler) sequence(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" || len(key) > 200 {
		h.fail(w, r, http.StatusBadRequest, errors.New("a sequence key (?key=, 1 to 200 bytes) is required"))
		return
	}
	ctx := r.Context()
	v := &sequenceView{Key: key}
	var rows []uidb.UISequenceJobsRow
	err := h.read(ctx, func(q *uidb.Queries) error {
		states, err := q.UISequenceStates(ctx, key)
		if err != nil {
			return err
		}
		v.States, v.Total = countStates(states, func(s uidb.UISequenceStatesRow) (string, int64) { return string(s.State), s.Jobs })
		if v.Total == 0 {
			return pgx.ErrNoRows
		}
		rows, err = q.UISequenceJobs(ctx, uidb.UISequenceJobsParams{Key: key, TextChars: textChars, MaxRows: sequenceJobsShown + 1})
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no job in sequence %q", clip(key, shownText)))
		return
	}
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	if len(rows) > sequenceJobsShown {
		rows, v.More = rows[:sequenceJobsShown], true
	}
	for i, j := range rows {
		j.Kind = clip(j.Kind, shownText)
		sj := seqJob{UISequenceJobsRow: j}
		if i > 0 {
			sj.After = rows[i-1].ID
		}
		v.Jobs = append(v.Jobs, sj)
	}
	p := h.newPage(w, r, "Sequence "+clip(key, shownText))
	p.Data = v
	h.render(w, r, http.StatusOK, "sequence", p)
}
