package tenureui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

// testWorkflowView: a workflow whose root is scheduled an hour out (root -> three noops ->
// join), driven through real claims: from the join's job page to its workflow, the layers and
// what the join waits on; "Retry now" on the root runs it, and the view shows the engine
// releasing the middle tasks and then the join, until every task succeeded.
func testWorkflowView(t *testing.T, b *browser) {
	f := newFixture(t, time.Second)
	ctx := context.Background()
	wf := jobs.NewWorkflow("browser workflow", nil)
	wf.Add("root", Noop{N: 1}, &jobs.TaskOpts{InsertOpts: jobs.InsertOpts{Delay: time.Hour}})
	mids := []string{"fetch", "resize", "index"}
	for i, m := range mids {
		wf.Add(m, Noop{N: 10 + i}, &jobs.TaskOpts{DependsOn: []string{"root"}})
	}
	wf.Add("join", Noop{N: 99}, &jobs.TaskOpts{DependsOn: mids})
	res, err := f.client.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	join, root := res.Tasks["join"].ID, res.Tasks["root"].ID

	tab := b.tab(t)
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", f.base, join)),
		chromedp.WaitVisible(chromedp.CSS(`#workflow-link`))))
	require.Equal(t, "waiting", text(t, tab, "#state"))
	require.Equal(t, "3", text(t, tab, "#deps-pending"))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#workflow-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#depth-2`))))
	require.Contains(t, text(t, tab, "#workflow-facts"), "browser workflow")
	require.Contains(t, text(t, tab, fmt.Sprintf("#task-%d td.waiting-on", join)), "fetch, resize, index")
	require.Contains(t, text(t, tab, fmt.Sprintf("#task-%d td.waiting-on", res.Tasks["fetch"].ID)), "root")
	n, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('#depth-1 tbody tr').length`))
	require.NoError(t, err)
	require.Equal(t, 3, n, "the three middle tasks are at depth 1")
	screenshot(t, tab, "workflow")

	// Run the root now: its finish releases the middle tasks, whose finishes release the join.
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#task-%d a[href$="/jobs/%d"]`, root, root))),
		chromedp.WaitVisible(chromedp.CSS(`#act-retry`)),
		chromedp.SendKeys(chromedp.CSS(`#act-retry input[name="reason"]`), "run the report now"),
		chromedp.Click(chromedp.CSS(`#act-retry button`)),
		chromedp.WaitVisible(chromedp.CSS(`#message, #error`))))
	outcome(t, tab)
	f.waitState(t, join, generics.JobStateSucceeded)
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/workflows/%s", f.base, res.ID)),
		chromedp.WaitVisible(chromedp.CSS(`#workflow-states`))))
	require.Equal(t, "succeeded 5", text(t, tab, "#workflow-states"))
	require.Equal(t, "—", text(t, tab, fmt.Sprintf("#task-%d td.waiting-on", join)))
	for _, name := range append(mids, "join") {
		got, err := f.client.Get(ctx, res.Tasks[name].ID)
		require.NoError(t, err)
		require.False(t, got.AttemptedAt.Before(*mustFinished(t, f, root)), "%s started before the root finished", name)
	}
}

func mustFinished(t *testing.T, f *fixture, id int64) *time.Time {
	t.Helper()
	got, err := f.client.Get(context.Background(), id)
	require.NoError(t, err)
	require.NotNil(t, got.FinishedAt)
	return got.FinishedAt
}
