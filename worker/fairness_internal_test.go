package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tenureq/tenure/generics"
)

func TestStrictServesBandsHighestFirst(t *testing.T) {
	segs, _, quotas := newPolicy(Fairness{}).plan(10)
	require.False(t, quotas)
	require.Len(t, segs, maxPriority)
	for i, s := range segs {
		require.Equal(t, maxPriority-i, s.priority)
		require.Zero(t, s.minAge)
		require.Zero(t, s.maxAge)
		require.Equal(t, 10, s.limit)
	}
}

func TestAgingSegmentsRankPromotedFirst(t *testing.T) {
	p := newPolicy(Fairness{Aging: &Aging{Step: time.Minute, Ceiling: 3}})
	segs, _, _ := p.plan(5)
	rankOf := func(prio int, age time.Duration) int {
		for _, s := range segs {
			if s.priority == prio && age >= s.minAge && (s.maxAge == 0 || age < s.maxAge) {
				return s.rank
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
		require.Equal(t, 5, s.limit)
		require.Equal(t, 5, s.quota, "no quotas: every band may fill the batch")
	}
}

func TestDeadlineSegmentsComeFirst(t *testing.T) {
	p := newPolicy(Fairness{Deadline: time.Minute})
	segs, _, _ := p.plan(3)
	for _, s := range segs {
		if s.minAge >= time.Minute {
			require.Zero(t, s.rank)
			require.Zero(t, s.maxAge)
		} else {
			require.Positive(t, s.rank)
			require.Equal(t, time.Minute, s.maxAge, "the normal window ends where the deadline starts")
		}
	}
}

func TestQuotaDeficitHonoursSharesOverSmallBatches(t *testing.T) {
	p := newPolicy(Fairness{Quotas: map[int]int{3: 12, 2: 6, 1: 2}})
	// Full batch of 20 with every band backlogged: exactly the shares.
	q := p.quotas(20)
	require.Equal(t, 12, q[3])
	require.Equal(t, 6, q[2])
	require.Equal(t, 2, q[1])
	got := bandCounts{3: 12, 2: 6, 1: 2}
	p.observe(20, q, &got)

	// Batches of one (a single slot freeing at a time): over 100 claims where every band
	// always has work, the deficit accounting reproduces the 60/30/10 split.
	p = newPolicy(Fairness{Quotas: map[int]int{3: 12, 2: 6, 1: 2}})
	served := map[int]int{}
	for range 100 {
		q := p.quotas(1)
		var got bandCounts
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
		p.observe(1, q, &got)
	}
	require.InDelta(t, 60, served[3], 3)
	require.InDelta(t, 30, served[2], 3)
	require.InDelta(t, 10, served[1], 3)
}

func TestQuotaCreditResetsWhenBandRunsDry(t *testing.T) {
	p := newPolicy(Fairness{Quotas: map[int]int{3: 1, 1: 1}})
	for range 50 {
		q := p.quotas(10)
		var got bandCounts
		got[3] = 10 // low has no work: high takes everything
		p.observe(10, q, &got)
	}
	// low never banked credit while it had nothing to run
	require.LessOrEqual(t, p.credit[1], 10.0)
	q := p.quotas(10)
	require.LessOrEqual(t, q[1], 10)
}

func TestFairnessValidation(t *testing.T) {
	require.ErrorIs(t, Fairness{Aging: &Aging{Step: time.Millisecond}}.validate("q"), ErrInvalidConfig)
	require.ErrorIs(t, Fairness{Aging: &Aging{Step: time.Minute, Ceiling: 12}}.validate("q"), ErrInvalidConfig)
	require.ErrorIs(t, Fairness{Quotas: map[int]int{0: 1}}.validate("q"), ErrInvalidConfig)
	require.ErrorIs(t, Fairness{Quotas: map[int]int{2: -1}}.validate("q"), ErrInvalidConfig)
	require.NoError(t, Fairness{Aging: &Aging{Step: time.Minute}, Quotas: map[int]int{2: 1}, Deadline: time.Hour}.validate("q"))
}

// TestFairWatermarks: the loop side of fair-share watermarks (fairshare.go). A claim records
// each tenant's newest claimed job and the keyless jobs' read position; the next plan passes
// them; a hinted late commit lowers the band's tenants; a full claim clears them; a policy
// with several segments per band (aging) passes none.
func TestFairWatermarks(t *testing.T) {
	q := &queue{pol: newPolicy(Fairness{FairShare: true})}
	q.w = &Worker{}
	q.mode = newClaimMode(q)
	m, ok := q.mode.(*fairMode)
	require.True(t, ok)
	at := func(us int64) time.Time { return time.UnixMicro(us) }
	job := func(prio int, key string, us int64) claimed {
		c := claimed{JobRow: &generics.JobRow{}}
		c.Priority, c.RunAt = prio, at(us)
		if key != "" {
			c.Metadata = map[string]string{"tenure.fair_key": key}
		}
		return c
	}
	p := claimPlan{n: 10}
	p.segs, p.quota, p.ranked = q.pol.plan(10)
	q.mode.plan(q, &p)
	require.True(t, p.fairWatermarks)
	require.Empty(t, p.known)

	r := claimResult{plan: p, got: []claimed{job(2, "a", 100), job(2, "a", 300), job(2, "b", 200), job(2, "", 400), job(3, "a", 50)}}
	r.fb.keylessUpto[2] = 500
	r.fb.fairMoved[2], r.fb.fairNext[2] = true, "b"
	q.mode.learn(q, &r)
	require.Equal(t, "b", m.cursor[2])
	require.Equal(t, int64(500), q.wm[2])
	require.Equal(t, map[tenantKey]int64{{2, "a"}: 300, {2, "b"}: 200, {3, "a"}: 50}, m.wm)

	failed := claimResult{plan: p, err: errors.New("claim failed")}
	failed.fb.fairMoved[2], failed.fb.fairNext[2] = true, "z"
	q.mode.learn(q, &failed)
	require.Equal(t, "b", m.cursor[2], "a failed claim moves nothing")

	p2 := claimPlan{n: 10}
	p2.segs, p2.quota, p2.ranked = q.pol.plan(10)
	q.mode.plan(q, &p2)
	got := map[tenantKey]int64{}
	for i, k := range p2.known {
		got[k] = p2.knownAfter[i]
	}
	require.Equal(t, m.wm, got)
	require.Equal(t, bandKeys{2: "b"}, p2.fairCursor)

	m.hint(2, 250) // a job of band 2 committed due at 250: tenants past it go back
	require.Equal(t, map[tenantKey]int64{{2, "a"}: 250, {2, "b"}: 200, {3, "a"}: 50}, m.wm)

	p3 := claimPlan{n: 10, full: true}
	p3.segs, p3.quota, p3.ranked = q.pol.plan(10)
	q.mode.plan(q, &p3)
	require.Empty(t, m.wm)
	require.Empty(t, p3.known)

	aging := &queue{pol: newPolicy(Fairness{FairShare: true, Aging: &Aging{Step: time.Minute}})}
	aging.mode = &fairMode{wm: map[tenantKey]int64{{1, "a"}: 10}}
	aging.wm[1] = 10
	p4 := claimPlan{n: 10}
	p4.after = aging.wm
	p4.segs, p4.quota, p4.ranked = aging.pol.plan(10)
	aging.mode.plan(aging, &p4)
	require.False(t, p4.fairWatermarks, "aging reads a band in several age windows")
	require.Empty(t, p4.known)
	require.Equal(t, bandTimes{}, p4.after)
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
