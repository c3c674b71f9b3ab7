package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFairnessValidation(t *testing.T) {
	require.ErrorIs(t, Fairness{Aging: &Aging{Step: time.Millisecond}}.validate("q"), ErrInvalidConfig)
	require.ErrorIs(t, Fairness{Aging: &Aging{Step: time.Minute, Ceiling: 12}}.validate("q"), ErrInvalidConfig)
	require.ErrorIs(t, Fairness{Quotas: map[int]int{0: 1}}.validate("q"), ErrInvalidConfig)
	require.ErrorIs(t, Fairness{Quotas: map[int]int{2: -1}}.validate("q"), ErrInvalidConfig)
	require.NoError(t, Fairness{Aging: &Aging{Step: time.Minute}, Quotas: map[int]int{2: 1}, Deadline: time.Hour}.validate("q"))
}

// TestEngineRuntimeParams: the settings a user gives a Config.EnginePool of their own are the
// private engine pool's, and the caller gets a copy.
func TestEngineRuntimeParams(t *testing.T) {
	p := EngineRuntimeParams()
	require.Equal(t, "off", p["jit"])
	require.Equal(t, "force_generic_plan", p["plan_cache_mode"])
	require.Equal(t, "off", p["enable_seqscan"])
	p["jit"] = "on"
	require.Equal(t, "off", EngineRuntimeParams()["jit"])
}
