package tenureui_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureui"
)

type stepArgs struct {
	N int `json:"n"`
}

func (stepArgs) Kind() string        { return "step" }
func (stepArgs) PayloadVersion() int { return 1 }

// rowCells returns the text of each cell of the table row with id rowID, tags stripped.
func rowCells(t *testing.T, body, rowID string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr id="` + regexp.QuoteMeta(rowID) + `">(.*?)</tr>`).FindStringSubmatch(body)
	require.NotNil(t, m, "row %s not in the page", rowID)
	var out []string
	for _, c := range regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(m[1], -1) {
		out = append(out, strings.TrimSpace(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(c[1], "")))
	}
	return out
}

// The workflow view lays a diamond out by depth, says what each task still waits on, follows
// the release of the root's dependents; a task's job page links to it; the sequence view lists
// a sequence's unfinished jobs in order; names are escaped; unknown ids are 404, bad ones 400.
func TestWorkflowAndSequenceViews(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("nightly <b>report</b>", nil)
	wf.Add("root", stepArgs{}, nil)
	wf.Add("left", stepArgs{1}, &jobs.TaskOpts{DependsOn: []string{"root"}})
	wf.Add("<i>right</i>", stepArgs{2}, &jobs.TaskOpts{DependsOn: []string{"root"}})
	wf.Add("join", stepArgs{3}, &jobs.TaskOpts{DependsOn: []string{"left", "<i>right</i>"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	var seq []int64
	for range 3 {
		r, err := c.Insert(ctx, stepArgs{}, &jobs.InsertOpts{Sequence: "account 7/eu"})
		require.NoError(t, err)
		seq = append(seq, r.Job.ID)
	}
	plain, err := c.Insert(ctx, stepArgs{}, nil)
	require.NoError(t, err)

	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui", Client: c})
	require.NoError(t, err)
	b := newClient(t, uiServer(t, h)+"/ui")
	id := func(name string) int64 { return res.Tasks[name].ID }
	row := func(name string) string { return fmt.Sprintf("task-%d", id(name)) }

	code, body, _ := b.get("/workflows/" + res.ID.String())
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "nightly &lt;b&gt;report&lt;/b&gt;")
	require.NotContains(t, body, "<i>right</i>")
	require.Contains(t, body, `id="depth-0"`)
	require.Contains(t, body, `id="depth-2"`)
	require.NotContains(t, body, `id="depth-3"`)
	// task, job, kind, queue, state, attempts, after, waiting on, last error
	require.Equal(t, []string{"root", fmt.Sprint(id("root")), "step", "default", "ready", "0/25", "—", "—", ""}, rowCells(t, body, row("root")))
	require.Equal(t, "waiting", rowCells(t, body, row("left"))[4])
	require.Equal(t, "root", rowCells(t, body, row("left"))[7])
	require.Equal(t, []string{"left, &lt;i&gt;right&lt;/i&gt;", "left, &lt;i&gt;right&lt;/i&gt;"}, rowCells(t, body, row("join"))[6:8])
	depthOf := func(body, rowID string) string {
		i := strings.Index(body, `<tr id="`+rowID+`"`)
		require.Positive(t, i)
		return body[strings.LastIndex(body[:i], `id="depth-`)+10:][:1]
	}
	require.Equal(t, "0", depthOf(body, row("root")))
	require.Equal(t, "1", depthOf(body, row("<i>right</i>")))
	require.Equal(t, "2", depthOf(body, row("join")))

	// The root succeeds (its trigger releases left and right): they wait on nothing now,
	// the join still on both.
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'succeeded', attempts = 1, attempted_at = now(), finished_at = now() WHERE id = $1`, id("root"))
	require.NoError(t, err)
	_, body, _ = b.get("/workflows/" + res.ID.String())
	require.Equal(t, "ready", rowCells(t, body, row("left"))[4])
	require.Equal(t, "—", rowCells(t, body, row("left"))[7])
	require.Equal(t, "left, &lt;i&gt;right&lt;/i&gt;", rowCells(t, body, row("join"))[7])
	require.Contains(t, body, `<span class="state ready">ready</span> 2`)

	// The job page of the join links to its workflow and says it waits on 2.
	code, body, _ = b.get(fmt.Sprintf("/jobs/%d", id("join")))
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `href="/ui/workflows/`+res.ID.String()+`" id="workflow-link"`)
	require.Regexp(t, `waiting on <b id="deps-pending">2</b> unresolved dependencies`, body)
	// A plain job's page has no such line.
	_, body, _ = b.get(fmt.Sprintf("/jobs/%d", plain.Job.ID))
	require.NotContains(t, body, `id="job-flow"`)

	// A sequence job's page links to its sequence; the view lists the jobs in order.
	_, body, _ = b.get(fmt.Sprintf("/jobs/%d", seq[1]))
	require.Contains(t, body, `href="/ui/sequences?key=account%207%2feu" id="sequence-link"`)
	require.Contains(t, body, "waiting for the job before it")
	code, body, _ = b.get("/sequences?key=account%207%2Feu")
	require.Equal(t, 200, code, body)
	m := regexp.MustCompile(`(?s)<table id="sequence-jobs">.*?</table>`).FindString(body)
	require.NotEmpty(t, m)
	var order []string
	for _, r := range regexp.MustCompile(`<a href="/ui/jobs/(\d+)">\d+</a></td><td>step</td><td><span class="state (\w+)"`).FindAllStringSubmatch(m, -1) {
		order = append(order, r[1]+":"+r[2])
	}
	require.Equal(t, []string{fmt.Sprintf("%d:ready", seq[0]), fmt.Sprintf("%d:waiting", seq[1]), fmt.Sprintf("%d:waiting", seq[2])}, order)

	code, _, _ = b.get("/workflows/00000000-0000-0000-0000-000000000001")
	require.Equal(t, 404, code)
	code, _, _ = b.get("/workflows/nope")
	require.Equal(t, 400, code)
	code, _, _ = b.get("/sequences?key=none")
	require.Equal(t, 404, code)
	code, _, _ = b.get("/sequences")
	require.Equal(t, 400, code)
}
