package tenureui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenuretest"
	"github.com/tenureq/tenure/tenureui"
	"github.com/tenureq/tenure/worker"
)

// Receipt is the job the schema test's worker runs, with one recorded effect.
type Receipt struct {
	Order string `json:"order"`
}

func (Receipt) Kind() string        { return "receipt" }
func (Receipt) PayloadVersion() int { return 1 }

// TestAnotherSchema: in a database where Tenure lives in schema "ui_jobs" only (no schema
// "tenure"), the dashboard configured with that schema serves the overview (with the live
// worker of that schema), the job lists, a job's page (its attempt and effect-ledger rows) and
// its raw args, and performs an audited action through the client it built there. A Client of
// that schema alone sets the schema; a Schema that differs from the Client's, or an invalid
// name, is refused.
func TestAnotherSchema(t *testing.T) {
	t.Parallel()
	const schema = "ui_jobs"
	ctx := context.Background()
	pool := tenuretest.PoolIn(t, schema)

	w, err := worker.New(pool, &worker.Config{Schema: schema, ID: "ui-schema-worker",
		Queues: map[string]worker.QueueConfig{"mail": {Concurrency: 1}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		FetchPollMax: 100 * time.Millisecond, RegistryEvery: 100 * time.Millisecond})
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Receipt]) error {
		_, err := worker.Effect(ctx, job.JobRow, "send", func(context.Context, worker.EffectCall) (string, error) {
			return "sent-" + job.Args.Order, nil
		})
		return err
	}, &worker.HandlerOptions{Queue: "mail"})
	wctx, stop := context.WithCancel(ctx)
	require.NoError(t, w.Start(wctx))
	t.Cleanup(func() {
		stop()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	client, err := jobs.NewClient(pool, &jobs.Config{Schema: schema, Registry: w.Registry()})
	require.NoError(t, err)
	res, err := client.Insert(ctx, Receipt{Order: "o-77"}, nil)
	require.NoError(t, err)
	done := res.Job.ID
	require.Eventually(t, func() bool {
		j, err := client.Get(ctx, done)
		require.NoError(t, err)
		return j.State == generics.JobStateSucceeded
	}, 20*time.Second, 20*time.Millisecond)
	var dead int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO ui_jobs.jobs
		(queue, kind, payload, state, attempts, max_attempts, generation, last_error_code, finished_at, attempted_at, errors)
		VALUES ('mail', 'receipt', '{"order":"o-dead"}', 'dead', 1, 1, 1, 'PERMANENT_REMOTE_ERROR', now(), now(),
		        '[{"attempt":1,"generation":1,"code":"PERMANENT_REMOTE_ERROR","message":"boom","at":"2026-01-01T00:00:00Z"}]')
		RETURNING id`).Scan(&dead))

	h, err := tenureui.New(pool, &tenureui.Config{Prefix: "/ui", Schema: schema, EnableActions: true,
		Authorizer: func(*http.Request, tenureui.Action) (string, error) { return "schema-test", nil }})
	require.NoError(t, err)
	b := newClient(t, uiServer(t, h))

	code, body, _ := b.get("/ui/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-band="mail/`, "the overview shows queue mail's dead job")
	require.Contains(t, body, "ui-schema-worker", "the overview lists the schema's worker")
	code, body, _ = b.get("/ui/jobs?state=dead")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, []string{fmt.Sprint(dead)}, listedIDs(body))
	code, body, _ = b.get("/ui/jobs")
	require.Equal(t, http.StatusOK, code, body)
	require.ElementsMatch(t, []string{fmt.Sprint(dead), fmt.Sprint(done)}, listedIDs(body))

	code, body, _ = b.get(fmt.Sprintf("/ui/jobs/%d", done))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "o-77")
	require.Contains(t, body, `<table id="effects">`, "the job page reads the schema's effect ledger")
	require.Contains(t, body, "sent-o-77")
	code, body, _ = b.get(fmt.Sprintf("/ui/jobs/%d/raw/args", done))
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"order":"o-77"}`, body)
	code, _, _ = b.get("/ui/jobs/999999")
	require.Equal(t, http.StatusNotFound, code)

	// An action goes through the client the dashboard built in the schema.
	code, body, _ = b.get(fmt.Sprintf("/ui/jobs/%d", dead))
	require.Equal(t, http.StatusOK, code, body)
	code, body = b.post(fmt.Sprintf("/ui/jobs/%d/reinject", dead), url.Values{"reason": {"schema test"}, "csrf": {csrfOf(t, body)}})
	require.Equal(t, http.StatusOK, code, body)
	audit, err := client.Audit(ctx, dead, 0, 10)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "schema-test", audit[0].Actor)

	// The Client's schema is the default; a different Schema is refused.
	h, err = tenureui.New(pool, &tenureui.Config{Prefix: "/ui", Client: client})
	require.NoError(t, err)
	code, body, _ = newClient(t, uiServer(t, h)).get(fmt.Sprintf("/ui/jobs/%d", done))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "o-77")
	_, err = tenureui.New(pool, &tenureui.Config{Client: client, Schema: "tenure"})
	require.ErrorIs(t, err, tenureui.ErrSchemaMismatch)
	require.ErrorIs(t, err, tenureui.ErrInvalidConfig)
	require.Contains(t, err.Error(), `"ui_jobs"`)
	for _, bad := range []string{"UI", "1ui", "public", "select", "pg_ui"} {
		_, err = tenureui.New(pool, &tenureui.Config{Schema: bad})
		require.ErrorIs(t, err, migrations.ErrInvalidSchema, bad)
		require.ErrorIs(t, err, tenureui.ErrInvalidConfig, bad)
		var ie *migrations.InvalidSchemaError
		require.ErrorAs(t, err, &ie, bad)
		require.Equal(t, bad, ie.Name)
	}
}
