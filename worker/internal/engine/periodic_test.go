package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/cron"
)

// TestTicksNextOnTheGrid: an interval's ticks are the multiples of Every since the Unix
// epoch, the same for every worker; Next is the first one strictly after t, also for times
// before 1970 (floor division), and Period is the interval.
func TestTicksNextOnTheGrid(t *testing.T) {
	s := Ticks{Every: time.Hour}
	at := func(y int, mo time.Month, d, h, m int) time.Time { return time.Date(y, mo, d, h, m, 0, 0, time.UTC) }
	require.Equal(t, at(2026, 3, 1, 13, 0), s.Next(at(2026, 3, 1, 12, 0)), "on a tick: the next one")
	require.Equal(t, at(2026, 3, 1, 13, 0), s.Next(at(2026, 3, 1, 12, 30)))
	require.Equal(t, at(1969, 12, 31, 23, 0), s.Next(at(1969, 12, 31, 22, 30)), "before the epoch")
	require.Equal(t, at(1970, 1, 1, 0, 0), s.Next(at(1969, 12, 31, 23, 0)))
	require.Equal(t, time.Hour, s.Period(at(2026, 3, 1, 12, 30)))
}

// TestTicksCronPeriodAndDue: a cron schedule is walked tick by tick; its period is the span
// between the next two ticks.
func TestTicksCronPeriodAndDue(t *testing.T) {
	c, err := cron.ParseIn("0,10 * * * *", "")
	require.NoError(t, err)
	s := Ticks{Cron: c}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	require.Equal(t, 50*time.Minute, s.Period(t0), "12:10 to 13:00")
	latest, missed, next := s.Due(t0, t0.Add(65*time.Minute))
	require.Equal(t, t0.Add(time.Hour), latest) // 12:10, 13:00 due after 12:00
	require.Equal(t, 2, missed)
	require.Equal(t, t0.Add(70*time.Minute), next)
}
