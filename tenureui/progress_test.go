package tenureui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

func getPage(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// TestJobPageProgressTagsOutput: the job page's live part (what the page polls) shows the
// running attempt's progress as it advances, its elapsed time and its timeout; the page shows
// the tags and, once succeeded, the output.
func TestJobPageProgressTagsOutput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Second)
	ctx := context.Background()
	row, err := f.client.Insert(ctx, Steps{N: 2}, &jobs.InsertOpts{Tags: []string{"nightly", "tenant:42"}})
	require.NoError(t, err)
	live := fmt.Sprintf("%s/jobs/%d?partial=1", f.base, row.Job.ID)
	f.step <- struct{}{}
	require.Eventually(t, func() bool { return strings.Contains(getPage(t, live), "1 of 2 (50%): step 1") }, 30*time.Second, 50*time.Millisecond)
	page := getPage(t, live)
	require.Contains(t, page, `<td id="timeout">10m00s</td>`)
	require.Contains(t, page, "(running)")
	require.Contains(t, page, `<span class="badge">nightly</span> <span class="badge">tenant:42</span>`)
	f.step <- struct{}{}
	f.waitState(t, row.Job.ID, generics.JobStateSucceeded)
	page = getPage(t, fmt.Sprintf("%s/jobs/%d", f.base, row.Job.ID))
	require.Contains(t, page, "2 of 2 (100%): step 2")
	require.Contains(t, page, `<pre id="output">`)
	require.Contains(t, page, "steps")
}

// TestSucceededJobDoesNotReadLikeAFailure: a job that succeeded after a failed attempt shows
// its last error code as an earlier attempt's, not as the job's.
func TestSucceededJobDoesNotReadLikeAFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Second)
	ctx := context.Background()
	row, err := f.client.Insert(ctx, Flaky{Order: 7}, nil)
	require.NoError(t, err)
	f.waitState(t, row.Job.ID, generics.JobStateDead)
	page := getPage(t, fmt.Sprintf("%s/jobs/%d", f.base, row.Job.ID))
	require.NotContains(t, page, "an earlier attempt failed")
	f.healed.Store(true)
	_, err = f.client.Reinject(ctx, row.Job.ID, jobs.Action{Actor: "t", Reason: "fixed"}, nil)
	require.NoError(t, err)
	f.waitState(t, row.Job.ID, generics.JobStateSucceeded)
	page = getPage(t, fmt.Sprintf("%s/jobs/%d", f.base, row.Job.ID))
	require.Contains(t, page, `<td id="last-error">none; an earlier attempt failed with`)
	list := getPage(t, f.base+"/jobs?state=succeeded&kind=flaky")
	require.Contains(t, list, `earlier: `)
}
