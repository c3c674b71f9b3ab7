package hist

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestQuantilesMatchExactWithinThreeSigFigs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := New()
	vals := make([]uint64, 0, 200000)
	for range 200000 {
		// log-uniform over 1us .. 100s
		v := uint64(math.Exp(r.Float64() * math.Log(1e8)))
		vals = append(vals, v)
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.95, 0.99, 0.999} {
		exact := float64(vals[int(math.Ceil(q*float64(len(vals))))-1])
		got := h.Quantile(q)
		if rel := math.Abs(got-exact) / math.Max(exact, 1); rel > 0.001 && math.Abs(got-exact) > 1 {
			t.Errorf("q=%v: got %v, exact %v (rel err %v)", q, got, exact, rel)
		}
	}
	if h.Count() != 200000 || h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
		t.Fatalf("count/min/max wrong: %d %d %d", h.Count(), h.Min(), h.Max())
	}
}

func TestSmallValuesExact(t *testing.T) {
	h := New()
	for v := uint64(0); v < 100; v++ {
		h.Record(v)
	}
	if got := h.Quantile(0.5); got != 49 {
		t.Fatalf("p50 = %v, want 49", got)
	}
	if got := h.Quantile(0.99); got != 98 {
		t.Fatalf("p99 = %v, want 98", got)
	}
}

func TestMergeAndReset(t *testing.T) {
	a, b := New(), New()
	for i := range 1000 {
		a.Record(uint64(i))
		b.Record(uint64(i + 1000))
	}
	a.Merge(b)
	if a.Count() != 2000 || a.Max() != 1999 || a.Min() != 0 {
		t.Fatalf("merge wrong: %d %d %d", a.Count(), a.Min(), a.Max())
	}
	a.Reset()
	if a.Count() != 0 || a.Quantile(0.5) != 0 {
		t.Fatal("reset did not empty")
	}
}

func TestWindowDropsOldSeconds(t *testing.T) {
	now := time.Unix(1000, 0)
	w := NewWindow(30)
	w.now = func() time.Time { return now }
	w.RecordDuration(5 * time.Millisecond)
	now = now.Add(10 * time.Second)
	w.RecordDuration(7 * time.Millisecond)
	if got := w.Snapshot().Count(); got != 2 {
		t.Fatalf("count = %d, want 2", got)
	}
	now = now.Add(25 * time.Second) // first record is now 35 s old
	if got := w.Snapshot().Count(); got != 1 {
		t.Fatalf("count = %d, want 1", got)
	}
	now = now.Add(30 * time.Second)
	if got := w.Snapshot().Count(); got != 0 {
		t.Fatalf("count = %d, want 0", got)
	}
}
