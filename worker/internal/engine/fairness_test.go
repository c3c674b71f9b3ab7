package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStrictServesBandsHighestFirst(t *testing.T) {
	segs, _, quotas := NewPolicy(Fairness{}).Plan(10)
	require.False(t, quotas)
	require.Len(t, segs, MaxPriority)
	for i, s := range segs {
		require.Equal(t, MaxPriority-i, s.Priority)
		require.Zero(t, s.MinAge)
		require.Zero(t, s.MaxAge)
		require.Equal(t, 10, s.Limit)
	}
}

func TestAgingSegmentsRankPromotedFirst(t *testing.T) {
	p := NewPolicy(Fairness{Aging: &Aging{Step: time.Minute, Ceiling: 3}})
	segs, _, _ := p.Plan(5)
	rankOf := func(prio int, age time.Duration) int {
		for _, s := range segs {
			if s.Priority == prio && age >= s.MinAge && (s.MaxAge == 0 || age < s.MaxAge) {
				return s.Rank
			}
		}
		t.Fatalf("no segment for priority %d age %v", prio, age)
		return 0
	}
	// fresh high beats fresh normal and fresh low
	require.Less(t, rankOf(3, 0), rankOf(2, 0))
	require.Less(t, rankOf(2, 0), rankOf(1, 0))
	// a normal job aged one step reaches the ceiling and goes before a fresh high one
	require.Less(t, rankOf(2, 90*time.Second), rankOf(3, 0))
	// a low job aged two steps reaches the ceiling too, and goes before both
	require.Less(t, rankOf(1, 150*time.Second), rankOf(2, 90*time.Second))
	// but a low job aged one step (effective 2) is still behind a fresh high one
	require.Greater(t, rankOf(1, 90*time.Second), rankOf(3, 0))
	// priorities above the ceiling are not aged and keep their order
	require.Less(t, rankOf(5, 0), rankOf(4, 0))
	require.Less(t, rankOf(4, 0), rankOf(2, time.Hour))
	for _, s := range segs {
		require.Equal(t, 5, s.Limit)
		require.Equal(t, 5, s.Quota, "no quotas: every band may fill the batch")
	}
}

func TestDeadlineSegmentsComeFirst(t *testing.T) {
	p := NewPolicy(Fairness{Deadline: time.Minute})
	segs, _, _ := p.Plan(3)
	for _, s := range segs {
		if s.MinAge >= time.Minute {
			require.Zero(t, s.Rank)
			require.Zero(t, s.MaxAge)
		} else {
			require.Positive(t, s.Rank)
			require.Equal(t, time.Minute, s.MaxAge, "the normal window ends where the deadline starts")
		}
	}
}

func TestQuotaDeficitHonoursSharesOverSmallBatches(t *testing.T) {
	p := NewPolicy(Fairness{Quotas: map[int]int{3: 12, 2: 6, 1: 2}})
	// Full batch of 20 with every band backlogged: exactly the shares.
	q := p.quotas(20)
	require.Equal(t, 12, q[3])
	require.Equal(t, 6, q[2])
	require.Equal(t, 2, q[1])
	got := BandCounts{3: 12, 2: 6, 1: 2}
	p.Observe(20, q, &got)

	// Batches of one (a single slot freeing at a time): over 100 claims where every band
	// always has work, the deficit accounting reproduces the 60/30/10 split.
	p = NewPolicy(Fairness{Quotas: map[int]int{3: 12, 2: 6, 1: 2}})
	served := map[int]int{}
	for range 100 {
		q := p.quotas(1)
		var got BandCounts
		// the claim statement serves in-quota bands first (by rank), then overflow by rank
		pick := 0
		for _, prio := range []int{3, 2, 1} {
			if q[prio] > 0 {
				pick = prio
				break
			}
		}
		if pick == 0 {
			pick = 3 // overflow goes to the highest rank
		}
		got[pick] = 1
		served[pick]++
		p.Observe(1, q, &got)
	}
	require.InDelta(t, 60, served[3], 3)
	require.InDelta(t, 30, served[2], 3)
	require.InDelta(t, 10, served[1], 3)
}

func TestQuotaCreditResetsWhenBandRunsDry(t *testing.T) {
	p := NewPolicy(Fairness{Quotas: map[int]int{3: 1, 1: 1}})
	for range 50 {
		q := p.quotas(10)
		var got BandCounts
		got[3] = 10 // low has no work: high takes everything
		p.Observe(10, q, &got)
	}
	// low never banked credit while it had nothing to run
	require.LessOrEqual(t, p.credit[1], 10.0)
	q := p.quotas(10)
	require.LessOrEqual(t, q[1], 10)
}
