// Package hist is a small bounded-memory latency histogram: log-linear buckets (8 per power
// of two) from 1 µs to about 1.2 hours, so quantiles are accurate to about 9%.
package hist

import (
	"math/bits"
	"sync"
	"time"
)

const (
	subBits  = 3
	sub      = 1 << subBits
	nBuckets = 32 * sub
)

// H is safe for concurrent use.
type H struct {
	mu     sync.Mutex
	counts [nBuckets]uint64
	n      uint64
	max    time.Duration
	sum    time.Duration
}

func bucket(us uint64) int {
	if us < sub {
		return int(us)
	}
	e := bits.Len64(us) - 1 // >= subBits
	m := (us >> (e - subBits)) & (sub - 1)
	b := (e-subBits+1)*sub + int(m)
	if b >= nBuckets {
		return nBuckets - 1
	}
	return b
}

// upper returns the upper bound (µs) of bucket b.
func upper(b int) uint64 {
	if b < sub {
		return uint64(b)
	}
	e := b/sub + subBits - 1
	m := uint64(b % sub)
	return ((sub + m + 1) << (e - subBits)) - 1
}

// Record adds one observation (negative values count as 0).
func (h *H) Record(d time.Duration) {
	us := uint64(0)
	if d > 0 {
		us = uint64(d / time.Microsecond)
	}
	b := bucket(us)
	h.mu.Lock()
	h.counts[b]++
	h.n++
	if d > 0 {
		h.sum += d
	}
	if d > h.max {
		h.max = d
	}
	h.mu.Unlock()
}

// Quantile returns the q-quantile (0..1), 0 when empty.
func (h *H) Quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			d := time.Duration(upper(b)) * time.Microsecond
			if d > h.max {
				d = h.max
			}
			return d
		}
	}
	return h.max
}

// Count returns the number of observations.
func (h *H) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Max returns the largest observation.
func (h *H) Max() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max
}

// Reset clears the histogram.
func (h *H) Reset() {
	h.mu.Lock()
	h.counts = [nBuckets]uint64{}
	h.n, h.max, h.sum = 0, 0, 0
	h.mu.Unlock()
}

// Sum returns the sum of the observations (negative ones counted as 0).
func (h *H) Sum() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sum
}

// Cumulative returns, for each of bounds (ascending), the number of observations at most that
// long, Prometheus style, along with the total count and sum, all from one consistent view.
// An observation counts toward the first bound at or above its bucket's upper edge, so counts
// err on the slow side by at most one bucket width (about 12%).
func (h *H) Cumulative(bounds []time.Duration) (counts []uint64, n uint64, sum time.Duration) {
	counts = make([]uint64, len(bounds))
	h.mu.Lock()
	defer h.mu.Unlock()
	i := 0
	var seen uint64
	for b, c := range h.counts {
		up := time.Duration(upper(b)) * time.Microsecond
		for i < len(bounds) && bounds[i] < up {
			counts[i] = seen
			i++
		}
		seen += c
	}
	for ; i < len(bounds); i++ {
		counts[i] = seen
	}
	return counts, h.n, h.sum
}
