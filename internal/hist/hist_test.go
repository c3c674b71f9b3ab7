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
