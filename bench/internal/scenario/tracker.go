package scenario

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenureq/tenure/bench/internal/hist"
)

// pickupTracker measures enqueue-commit → handler-start per job. The producer reports the
// instant its insert call returned (the commit is acknowledged) and the worker reports the
// instant the handler started; whichever report comes second records the difference (clamped
// at zero: a worker woken by the commit's NOTIFY can start the job before the client has read
// the commit acknowledgement). Memory is bounded by the number of jobs committed but not yet
// started, which every scenario bounds with a backlog cap.
type pickupTracker struct {
	base   time.Time
	from   atomic.Int64 // jobs committed before base+from (ns) are not recorded (warm-up)
	shards [64]trackerShard
	rec    *hist.Recorder
	// Phases (optional, see usePhases): jobs committed from phaseAt[i] (ns since base) on are
	// recorded in phaseRec[i] as well as in rec.
	phaseAt  []atomic.Int64
	phaseRec []*hist.Recorder
}

// usePhases prepares n per-phase histograms; beginPhase(i) starts phase i's interval.
func (t *pickupTracker) usePhases(n int) {
	t.phaseAt = make([]atomic.Int64, n)
	t.phaseRec = make([]*hist.Recorder, n)
	for i := range n {
		t.phaseAt[i].Store(math.MaxInt64)
		t.phaseRec[i] = hist.NewRecorder()
	}
}

// beginPhase makes jobs committed from now on count for phase i.
func (t *pickupTracker) beginPhase(i int) { t.phaseAt[i].Store(int64(time.Since(t.base))) }

// phaseSnapshot returns phase i's histogram.
func (t *pickupTracker) phaseSnapshot(i int) *hist.Histogram { return t.phaseRec[i].Snapshot() }

type trackerShard struct {
	mu sync.Mutex
	m  map[int64]int64 // seq -> at<<1 | 0 (commit seen) or at<<1 | 1 (start seen)
}

func newPickupTracker(warmup time.Duration) *pickupTracker {
	t := &pickupTracker{base: time.Now(), rec: hist.NewRecorder()}
	t.from.Store(int64(warmup))
	for i := range t.shards {
		t.shards[i].m = make(map[int64]int64, 1024)
	}
	return t
}

// startClock ignores jobs committed before now+warmup.
func (t *pickupTracker) startClock(warmup time.Duration) {
	t.from.Store(int64(time.Since(t.base) + warmup))
}

func (t *pickupTracker) committed(seqs []int64) {
	at := int64(time.Since(t.base))
	for _, seq := range seqs {
		sh := &t.shards[uint64(seq)%uint64(len(t.shards))]
		sh.mu.Lock()
		v, ok := sh.m[seq]
		if ok && v&1 == 1 {
			delete(sh.m, seq)
			sh.mu.Unlock()
			t.record(at, v>>1)
			continue
		}
		sh.m[seq] = at << 1
		sh.mu.Unlock()
	}
}

func (t *pickupTracker) started(seq int64) {
	at := int64(time.Since(t.base))
	sh := &t.shards[uint64(seq)%uint64(len(t.shards))]
	sh.mu.Lock()
	v, ok := sh.m[seq]
	if ok && v&1 == 0 {
		delete(sh.m, seq)
		sh.mu.Unlock()
		t.record(v>>1, at)
		return
	}
	sh.m[seq] = at<<1 | 1
	sh.mu.Unlock()
}

func (t *pickupTracker) record(commitAt, startAt int64) {
	if commitAt < t.from.Load() {
		return
	}
	t.rec.RecordDuration(time.Duration(startAt - commitAt))
	for i := len(t.phaseAt) - 1; i >= 0; i-- {
		if commitAt >= t.phaseAt[i].Load() {
			t.phaseRec[i].RecordDuration(time.Duration(startAt - commitAt))
			break
		}
	}
}

func (t *pickupTracker) snapshot() *hist.Histogram { return t.rec.Snapshot() }
