package jobs_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

type kindArgs struct{ kind string }

func (a kindArgs) Kind() string      { return a.kind }
func (kindArgs) PayloadVersion() int { return 1 }

type hugeVersionArgs struct{}

func (hugeVersionArgs) Kind() string        { return "huge_version" }
func (hugeVersionArgs) PayloadVersion() int { return math.MaxInt32 + 2 }

// TestInsertOptionsOutOfRangeAreTypedErrors checks every InsertOpts field and the args' kind and
// version against what the schema's CHECKs and column types accept: each is refused in Go
// with a typed error naming the field (never a raw SQLSTATE, never a silently changed value),
// on Insert and InsertMany, and nothing is written.
func TestInsertOptionsOutOfRangeAreTypedErrors(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		opts  *jobs.InsertOpts
		field string
	}{
		{"run at year 1", &jobs.InsertOpts{RunAt: time.Date(1, 6, 1, 0, 0, 0, 0, time.UTC)}, "RunAt"},
		{"run at 1969", &jobs.InsertOpts{RunAt: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)}, "RunAt"},
		{"run at year 10000", &jobs.InsertOpts{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "RunAt"},
		{"run at 2200", &jobs.InsertOpts{RunAt: generics.MaxJobTime}, "RunAt"},
		{"delay past 2200", &jobs.InsertOpts{Delay: time.Duration(math.MaxInt64)}, "Delay"},
		{"run at year 300000", &jobs.InsertOpts{RunAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)}, "RunAt"},
		{"priority 10", &jobs.InsertOpts{Priority: 10}, "Priority"},
		{"priority -1", &jobs.InsertOpts{Priority: -1}, "Priority"},
		{"max attempts 1001", &jobs.InsertOpts{MaxAttempts: 1001}, "MaxAttempts"},
		{"max attempts -1", &jobs.InsertOpts{MaxAttempts: -1}, "MaxAttempts"},
		{"lease 999ms", &jobs.InsertOpts{Lease: 999 * time.Millisecond}, "Lease"},
		{"lease 24h+1ms", &jobs.InsertOpts{Lease: 24*time.Hour + time.Millisecond}, "Lease"},
		{"lease negative", &jobs.InsertOpts{Lease: -time.Second}, "Lease"},
		{"queue too long", &jobs.InsertOpts{Queue: strings.Repeat("q", 129)}, "Queue"},
		{"queue with NUL", &jobs.InsertOpts{Queue: "q\x00"}, "Queue"},
		{"delay negative", &jobs.InsertOpts{Delay: -time.Nanosecond}, "Delay"},
	} {
		for _, path := range []string{"Insert", "InsertMany"} {
			if path == "Insert" {
				_, err = c.Insert(ctx, blobArgs{Data: "x"}, tc.opts)
			} else {
				_, err = c.InsertMany(ctx, []jobs.InsertManyParams{{Args: blobArgs{Data: "x"}}, {Args: blobArgs{Data: "y"}, Opts: tc.opts}})
			}
			require.ErrorIs(t, err, jobs.ErrInvalidOptions, "%s via %s", tc.name, path)
			var oe *jobs.OptionError
			require.True(t, errors.As(err, &oe), "%s via %s: %v", tc.name, path, err)
			require.Equal(t, tc.field, oe.Field, "%s via %s", tc.name, path)
		}
	}

	for _, tc := range []struct {
		name   string
		args   generics.Args
		reason error
	}{
		{"empty kind", kindArgs{""}, generics.ErrInvalidPayload},
		{"kind of 129 characters", kindArgs{strings.Repeat("é", 129)}, generics.ErrInvalidPayload},
		{"kind with NUL", kindArgs{"a\x00b"}, generics.ErrInvalidPayload},
		{"kind not UTF-8", kindArgs{"a\xffb"}, generics.ErrInvalidPayload},
		{"version beyond int32", hugeVersionArgs{}, generics.ErrUnsupportedVersion},
	} {
		_, err = c.Insert(ctx, tc.args, nil)
		require.ErrorIs(t, err, tc.reason, tc.name)
		var perr *generics.PayloadError
		require.True(t, errors.As(err, &perr), "%s: %v", tc.name, err)
		_, err = c.InsertMany(ctx, []jobs.InsertManyParams{{Args: tc.args}})
		require.ErrorIs(t, err, tc.reason, tc.name)
	}
	require.Zero(t, count(t, c), "nothing was written")

	// the edges of every range are accepted
	edges := []*jobs.InsertOpts{
		{RunAt: time.Unix(0, 0)},
		{RunAt: generics.MaxJobTime.Add(-time.Microsecond)}, // the last instant of the job-time window
		{Delay: 100 * 365 * 24 * time.Hour},                 // a run time inside the job-time window
		{Priority: 1, MaxAttempts: 1, Lease: time.Second},
		{Priority: 9, MaxAttempts: 1000, Lease: 24 * time.Hour, Queue: strings.Repeat("q", 128)},
	}
	for _, o := range edges {
		_, err := c.Insert(ctx, blobArgs{Data: "x"}, o)
		require.NoError(t, err, "%+v", o)
	}
	params := make([]jobs.InsertManyParams, len(edges))
	for i, o := range edges {
		params[i] = jobs.InsertManyParams{Args: blobArgs{Data: "x"}, Opts: o}
	}
	_, err = c.InsertMany(ctx, params)
	require.NoError(t, err)
	_, err = c.Insert(ctx, kindArgs{strings.Repeat("é", 128)}, nil)
	require.NoError(t, err)
	require.Equal(t, 2*len(edges)+1, count(t, c))
	var far time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT max(run_at) FROM tenure.jobs WHERE run_at > now() + interval '99 years' AND run_at < now() + interval '101 years'").Scan(&far))
	require.False(t, far.IsZero(), "a Delay of 100 years lands 100 years ahead")
}
