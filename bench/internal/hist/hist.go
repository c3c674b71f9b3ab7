// Package hist is a small log-bucketed latency histogram with bounded memory, in the spirit of
// HdrHistogram: values are bucketed by their power of two and, inside each power of two, by
// their top 11 significant bits, so a recorded value is reproduced with a relative error below
// 1/1024 (better than 3 significant figures) whatever its magnitude, and memory is bounded by
// the number of distinct powers of two touched (16 KiB each, allocated lazily).
//
// Values are unsigned integers in whatever unit the caller chooses (the bench records
// microseconds). Histogram is not safe for concurrent use; Window and Recorder are.
package hist

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

const (
	subBits  = 11
	subCount = 1 << subBits // 2048 slots per group
	subHalf  = subCount / 2
	groups   = 64 - subBits + 1
)

// Histogram counts values in log-linear buckets.
type Histogram struct {
	counts [groups]*[subCount]uint64
	total  uint64
	sum    float64
	min    uint64
	max    uint64
}

// New returns an empty histogram.
func New() *Histogram { return &Histogram{min: math.MaxUint64} }

// index maps v to (group, slot). Group 0 holds 0..2047 exactly; group g>0 holds values whose
// bit length is subBits+g, with slot = v >> g in [1024, 2048).
func index(v uint64) (int, int) {
	l := bits.Len64(v)
	if l <= subBits {
		return 0, int(v)
	}
	g := l - subBits
	return g, int(v >> uint(g))
}

// bucketValue returns a representative value (the midpoint) of a bucket.
func bucketValue(g, slot int) float64 {
	if g == 0 {
		return float64(slot)
	}
	lo := float64(uint64(slot) << uint(g))
	width := float64(uint64(1) << uint(g))
	return lo + width/2
}

// Record adds one observation.
func (h *Histogram) Record(v uint64) {
	g, s := index(v)
	b := h.counts[g]
	if b == nil {
		b = new([subCount]uint64)
		h.counts[g] = b
	}
	b[s]++
	h.total++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// RecordDuration records d in microseconds (negative durations count as 0).
func (h *Histogram) RecordDuration(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.Record(uint64(d / time.Microsecond))
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.total }

// Mean is the arithmetic mean of the observations (0 if empty).
func (h *Histogram) Mean() float64 {
	if h.total == 0 {
		return 0
	}
	return h.sum / float64(h.total)
}

// Min is the smallest observation (0 if empty).
func (h *Histogram) Min() uint64 {
	if h.total == 0 {
		return 0
	}
	return h.min
}

// Max is the largest observation (0 if empty).
func (h *Histogram) Max() uint64 { return h.max }

// Quantile returns the value at quantile q in [0,1] (0 if empty). It uses the nearest-rank
// definition and reports the bucket midpoint, clamped to the observed min and max.
func (h *Histogram) Quantile(q float64) float64 {
	if h.total == 0 {
		return 0
	}
	if q <= 0 {
		return float64(h.min)
	}
	if q >= 1 {
		return float64(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for g := 0; g < groups; g++ {
		b := h.counts[g]
		if b == nil {
			continue
		}
		start := 0
		if g > 0 {
			start = subHalf
		}
		for s := start; s < subCount; s++ {
			c := b[s]
			if c == 0 {
				continue
			}
			seen += c
			if seen >= rank {
				v := bucketValue(g, s)
				return math.Min(math.Max(v, float64(h.min)), float64(h.max))
			}
		}
	}
	return float64(h.max)
}

// Merge adds all of o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.total == 0 {
		return
	}
	for g := 0; g < groups; g++ {
		ob := o.counts[g]
		if ob == nil {
			continue
		}
		b := h.counts[g]
		if b == nil {
			b = new([subCount]uint64)
			h.counts[g] = b
		}
		for s := range ob {
			b[s] += ob[s]
		}
	}
	h.total += o.total
	h.sum += o.sum
	if o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
}

// Reset empties the histogram, keeping its allocated buckets for reuse.
func (h *Histogram) Reset() {
	for _, b := range h.counts {
		if b != nil {
			clear(b[:])
		}
	}
	h.total, h.sum, h.min, h.max = 0, 0, math.MaxUint64, 0
}

// Recorder is a mutex-guarded Histogram for concurrent recording.
type Recorder struct {
	mu sync.Mutex
	h  *Histogram
}

// NewRecorder returns an empty concurrent recorder.
func NewRecorder() *Recorder { return &Recorder{h: New()} }

// RecordDuration records d in microseconds.
func (r *Recorder) RecordDuration(d time.Duration) {
	r.mu.Lock()
	r.h.RecordDuration(d)
	r.mu.Unlock()
}

// Snapshot returns a copy of the recorded histogram.
func (r *Recorder) Snapshot() *Histogram {
	out := New()
	r.mu.Lock()
	out.Merge(r.h)
	r.mu.Unlock()
	return out
}

// Window is a rolling time window of histograms: one histogram per one-second slot, so
// memory is bounded by the window length, not by the number of observations.
type Window struct {
	mu    sync.Mutex
	slots []windowSlot
	now   func() time.Time
}

type windowSlot struct {
	sec int64
	h   *Histogram
}

// NewWindow returns a rolling window covering the last `seconds` whole seconds.
func NewWindow(seconds int) *Window {
	if seconds < 1 {
		seconds = 1
	}
	w := &Window{slots: make([]windowSlot, seconds), now: time.Now}
	for i := range w.slots {
		w.slots[i] = windowSlot{sec: math.MinInt64, h: New()}
	}
	return w
}

// RecordDuration records d (in microseconds) in the current second's slot.
func (w *Window) RecordDuration(d time.Duration) {
	sec := w.now().Unix()
	w.mu.Lock()
	s := &w.slots[int(uint64(sec)%uint64(len(w.slots)))]
	if s.sec != sec {
		s.h.Reset()
		s.sec = sec
	}
	s.h.RecordDuration(d)
	w.mu.Unlock()
}

// Snapshot merges the slots that fall inside the window ending now.
func (w *Window) Snapshot() *Histogram {
	sec := w.now().Unix()
	oldest := sec - int64(len(w.slots)) + 1
	out := New()
	w.mu.Lock()
	for i := range w.slots {
		s := &w.slots[i]
		if s.sec >= oldest && s.sec <= sec {
			out.Merge(s.h)
		}
	}
	w.mu.Unlock()
	return out
}
