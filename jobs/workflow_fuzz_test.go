package jobs_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/jobs"
)

// FuzzWorkflowValidate builds workflows from arbitrary bytes (task names and dependency lists,
// forward references, self-references, repeats, unknown names, cycles): Validate never panics,
// refuses with a *WorkflowError, and accepts exactly the graphs whose dependencies all exist and
// that have no cycle (checked against a plain depth-first search here).
func FuzzWorkflowValidate(f *testing.F) {
	f.Add([]byte{3, 0, 1, 1, 2, 2})
	f.Add([]byte{2, 0, 1, 1, 0})
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{4, 0, 9, 1, 0, 2, 0, 3, 1, 3, 2})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			require.ErrorIs(t, jobs.NewWorkflow("f", nil).Validate(), jobs.ErrInvalidWorkflow)
			return
		}
		n := int(data[0]%12) + 1
		deps := make([][]string, n)
		for i := 1; i+1 < len(data); i += 2 {
			from, to := int(data[i])%n, int(data[i+1])%(n+2) // n, n+1: unknown names
			deps[from] = append(deps[from], fmt.Sprintf("t%d", to))
		}
		wf := jobs.NewWorkflow("f", nil)
		for i := 0; i < n; i++ {
			wf.Add(fmt.Sprintf("t%d", i), blobArgs{}, &jobs.TaskOpts{DependsOn: deps[i]})
		}
		err := wf.Validate()
		if err != nil {
			var we *jobs.WorkflowError
			require.ErrorAs(t, err, &we)
			require.ErrorIs(t, err, jobs.ErrInvalidWorkflow)
		}
		// The reference: repeats, unknown names and cycles (self-loops included) are refused.
		ok := true
		for i := range deps {
			seen := map[string]bool{}
			for _, d := range deps[i] {
				var k int
				fmt.Sscanf(d, "t%d", &k)
				if seen[d] || k >= n {
					ok = false
				}
				seen[d] = true
			}
		}
		if ok {
			state := make([]int, n)
			var cyclic func(i int) bool
			cyclic = func(i int) bool {
				if state[i] == 1 {
					return true
				}
				if state[i] == 2 {
					return false
				}
				state[i] = 1
				for _, d := range deps[i] {
					var k int
					fmt.Sscanf(d, "t%d", &k)
					if cyclic(k) {
						return true
					}
				}
				state[i] = 2
				return false
			}
			for i := 0; i < n && ok; i++ {
				ok = !cyclic(i)
			}
		}
		require.Equal(t, ok, err == nil, "deps %v: %v", deps, err)
		if errors.Is(err, jobs.ErrWorkflowCycle) {
			var we *jobs.WorkflowError
			require.ErrorAs(t, err, &we)
			if len(we.Cycle) > 0 {
				require.Equal(t, we.Cycle[0], we.Cycle[len(we.Cycle)-1], "a cycle ends where it starts")
				require.True(t, slices.Contains(we.Cycle, we.Task))
			}
		}
	})
}
