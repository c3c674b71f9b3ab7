package hist

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuantiles(t *testing.T) {
	var h H
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	require.EqualValues(t, 1000, h.Count())
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.95, 950 * time.Millisecond}, {0.99, 990 * time.Millisecond}} {
		got := h.Quantile(c.q)
		require.InDelta(t, float64(c.want), float64(got), float64(c.want)*0.13, "q=%v got %v", c.q, got)
	}
	require.Equal(t, time.Second, h.Max())
	h.Reset()
	require.Zero(t, h.Quantile(0.5))
}

func TestBucketsMonotonic(t *testing.T) {
	prev := -1
	for us := uint64(0); us < 1<<22; us = us*9/8 + 1 {
		b := bucket(us)
		require.GreaterOrEqual(t, b, prev)
		require.GreaterOrEqual(t, upper(b), us, "upper(%d) < %d", b, us)
		prev = b
	}
}

func TestCumulative(t *testing.T) {
	var h H
	for _, d := range []time.Duration{500 * time.Microsecond, 3 * time.Millisecond, 3 * time.Millisecond, 40 * time.Millisecond, 2 * time.Second} {
		h.Record(d)
	}
	counts, n, sum := h.Cumulative([]time.Duration{time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond, time.Second, 10 * time.Second})
	require.Equal(t, []uint64{1, 3, 4, 4, 5}, counts)
	require.EqualValues(t, 5, n)
	require.Equal(t, 2046500*time.Microsecond, sum)
	// Cumulative counts never decrease and never exceed the total.
	for i := 1; i < len(counts); i++ {
		require.LessOrEqual(t, counts[i-1], counts[i])
	}
	counts, n, _ = (&H{}).Cumulative([]time.Duration{time.Second})
	require.Equal(t, []uint64{0}, counts)
	require.Zero(t, n)
}
