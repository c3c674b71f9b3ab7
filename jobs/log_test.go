package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/logkey"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestOperatorLogRecordsCarryTheJobKeys: each operator action on one job (retry, cancel,
// re-inject, delete) logs one INFO record with job_id, kind, queue, attempt and generation
// under these names, the actor and the reason; a purge logs the number of jobs. No record
// uses a key outside logkey.Known.
func TestOperatorLogRecordsCarryTheJobKeys(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	buf := &lockedBuffer{}
	c, err := jobs.NewClient(pool, &jobs.Config{Logger: slog.New(slog.NewJSONHandler(buf, nil))})
	require.NoError(t, err)
	act := jobs.Action{Actor: "ops", Reason: "test"}
	a, err := c.Insert(ctx, blobArgs{Data: "a"}, &jobs.InsertOpts{Queue: "mail", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = c.Retry(ctx, a.Job.ID, act) // scheduled -> due now
	require.NoError(t, err)
	_, err = c.Cancel(ctx, a.Job.ID, act)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'dead', attempts = 3, generation = 3, claim_token = gen_random_uuid(),
attempted_at = now(), cancel_requested_at = NULL WHERE id = $1`, a.Job.ID)
	require.NoError(t, err)
	_, err = c.Reinject(ctx, a.Job.ID, act, nil)
	require.NoError(t, err)
	require.NoError(t, c.Delete(ctx, a.Job.ID, act))
	_, err = c.Purge(ctx, act, jobs.PurgeParams{State: generics.JobStateSucceeded, Before: time.Now()})
	require.NoError(t, err)

	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(buf.b.String()), "\n") {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		require.Equal(t, "INFO", r[slog.LevelKey], line)
		require.Equal(t, "ops", r["actor"], line)
		require.Equal(t, "test", r["reason"], line)
		for k := range r {
			if k != slog.TimeKey && k != slog.LevelKey && k != slog.MessageKey {
				require.True(t, logkey.Known[k], "unknown log key %q: %s", k, line)
			}
		}
		msgs = append(msgs, r[slog.MessageKey].(string))
		if strings.Contains(line, "purged") {
			require.Contains(t, r, logkey.Jobs, line)
			continue
		}
		require.EqualValues(t, a.Job.ID, r[logkey.JobID], line)
		require.Equal(t, "blob", r[logkey.Kind], line)
		require.Equal(t, "mail", r[logkey.Queue], line)
		require.Contains(t, r, logkey.Attempt, line)
		require.Contains(t, r, logkey.Generation, line)
	}
	require.Equal(t, []string{"tenure: job retried", "tenure: job cancel", "tenure: job reinjected", "tenure: job deleted", "tenure: jobs purged"}, msgs)
}
