package tenuretest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/tenuretest"
	"github.com/tenureq/tenure/worker"
)

type bulkMail struct {
	To string `json:"to"`
}

func (bulkMail) Kind() string        { return "bulk_mail" }
func (bulkMail) PayloadVersion() int { return 1 }

// WorkBatch runs the jobs through real claims in one batch call and returns each job's
// outcome in the order of its args.
func TestWorkBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := tenuretest.Pool(t)
	var sizes []int
	res := tenuretest.WorkBatch(ctx, t, pool, func(ctx context.Context, batch []*generics.Job[bulkMail]) ([]error, error) {
		sizes = append(sizes, len(batch))
		out := make([]error, len(batch))
		for i, j := range batch {
			if j.ClaimToken == nil {
				return nil, errors.New("not claimed")
			}
			if j.Args.To == "" {
				out[i] = worker.Permanent(errors.New("no address"))
				continue
			}
			if err := worker.SetOutput(worker.JobContext(ctx, j.JobRow), j.Args.To); err != nil {
				return nil, err
			}
		}
		return out, nil
	}, []bulkMail{{To: "a@example.com"}, {To: ""}, {To: "c@example.com"}}, nil)
	require.Equal(t, []int{3}, sizes, "one call for the three jobs")
	require.Len(t, res, 3)
	require.Equal(t, worker.OutcomeSucceeded, res[0].Outcome.Transition)
	require.JSONEq(t, `"a@example.com"`, string(res[0].Job.Output))
	require.Equal(t, worker.OutcomeDead, res[1].Outcome.Transition)
	require.Equal(t, generics.JobStateDead, res[1].Job.State)
	require.Equal(t, generics.JobStateSucceeded, res[2].Job.State)
	require.JSONEq(t, `"c@example.com"`, string(res[2].Job.Output))
}
