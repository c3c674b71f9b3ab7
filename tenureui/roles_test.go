package tenureui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/tenureui"
)

// TestDashboardUnderGrantedRoles (issue 29, item 11): the read-only dashboard serves every page
// from a role that took only tenure.grant_reader (SELECT), and the dashboard with actions
// re-injects a dead job, audited, from a role that took only tenure.grant_operator.
func TestDashboardUnderGrantedRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	id := insertDead(t, pool, "mail", "welcome", `{"to":"a@example.com"}`)
	_, err := pool.Exec(ctx, `INSERT INTO tenure.effects (key, job_id, name, generation, result)
		VALUES ('job:' || $1::bigint || ':effect:send', $1, 'send', 1, '"ok"')`, id)
	require.NoError(t, err)
	reader := pgtest.RolePool(t, pool, pgtest.NewRole(t, pool, "SELECT tenure.grant_reader('{role}')"), 4)
	operator := pgtest.RolePool(t, pool, pgtest.NewRole(t, pool, "SELECT tenure.grant_operator('{role}')"), 4)

	h, err := tenureui.New(reader, &tenureui.Config{Prefix: "/ui"})
	require.NoError(t, err)
	b := newClient(t, uiServer(t, h))
	for _, p := range []string{"/ui/", "/ui/?partial=1", "/ui/jobs", "/ui/jobs?state=dead", "/ui/jobs?state=ready",
		"/ui/jobs?state=running", "/ui/jobs?state=succeeded", fmt.Sprintf("/ui/jobs/%d", id)} {
		code, body, _ := b.get(p)
		require.Equal(t, http.StatusOK, code, "%s under grant_reader: %s", p, body)
	}
	_, err = reader.Exec(ctx, `UPDATE tenure.jobs SET state = 'ready' WHERE id = $1`, id)
	require.Error(t, err, "the reader role changes nothing")

	h, err = tenureui.New(operator, &tenureui.Config{Prefix: "/ui", EnableActions: true,
		Authorizer: func(*http.Request, tenureui.Action) (string, error) { return "ada", nil }})
	require.NoError(t, err)
	base := uiServer(t, h)
	b = newClient(t, base)
	code, body, _ := b.get(fmt.Sprintf("/ui/jobs/%d", id))
	require.Equal(t, http.StatusOK, code)
	form := url.Values{"reason": {"fixed upstream"}, "csrf": {csrfOf(t, body)}}
	req, _ := http.NewRequest(http.MethodPost, base+fmt.Sprintf("/ui/jobs/%d/reinject", id), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b.c.Do(req)
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 400, "%s", out)
	c := mustClient(t, operator)
	j, err := c.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, j.State)
	entries, err := c.Audit(ctx, id, 0, 10)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "ada", entries[0].Actor)
}
