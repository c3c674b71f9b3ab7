package scenario

import (
	"testing"
	"time"
)

func TestPickupTrackerEitherOrder(t *testing.T) {
	tr := newPickupTracker(0)
	tr.committed([]int64{1, 2})
	time.Sleep(3 * time.Millisecond)
	tr.started(1)
	tr.started(3) // the handler starts before the producer has read the commit ack
	tr.committed([]int64{3})
	h := tr.snapshot()
	if h.Count() != 2 {
		t.Fatalf("count = %d, want 2 (job 2 never started)", h.Count())
	}
	if h.Max() < 3000 { // job 1: >= 3 ms, in microseconds
		t.Fatalf("max = %dus, want >= 3000", h.Max())
	}
	if h.Min() != 0 { // job 3 clamps to 0
		t.Fatalf("min = %dus, want 0", h.Min())
	}
	for i := range tr.shards {
		tr.shards[i].mu.Lock()
		n := len(tr.shards[i].m)
		tr.shards[i].mu.Unlock()
		if i == 2 && n != 1 || i != 2 && n != 0 {
			t.Fatalf("shard %d holds %d entries", i, n)
		}
	}
}

func TestPickupTrackerWarmup(t *testing.T) {
	tr := newPickupTracker(0)
	tr.startClock(time.Hour)
	tr.committed([]int64{7})
	tr.started(7)
	if n := tr.snapshot().Count(); n != 0 {
		t.Fatalf("recorded %d warm-up jobs", n)
	}
}
