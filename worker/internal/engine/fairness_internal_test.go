package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tenureq/tenure/generics"
)

// TestFairWatermarks: the loop side of fair-share watermarks (fairshare.go). A claim records
// each tenant's newest claimed job and the keyless jobs' read position; the next plan passes
// them; a hinted late commit lowers the band's tenants; a full claim clears them; a policy
// with several segments per band (aging) passes none.
func TestFairWatermarks(t *testing.T) {
	q := &queue{pol: NewPolicy(Fairness{FairShare: true})}
	q.w = &Engine{}
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
	p.segs, p.quota, p.ranked = q.pol.Plan(10)
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
	p2.segs, p2.quota, p2.ranked = q.pol.Plan(10)
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
	p3.segs, p3.quota, p3.ranked = q.pol.Plan(10)
	q.mode.plan(q, &p3)
	require.Empty(t, m.wm)
	require.Empty(t, p3.known)

	aging := &queue{pol: NewPolicy(Fairness{FairShare: true, Aging: &Aging{Step: time.Minute}})}
	aging.mode = &fairMode{wm: map[tenantKey]int64{{1, "a"}: 10}}
	aging.wm[1] = 10
	p4 := claimPlan{n: 10}
	p4.after = aging.wm
	p4.segs, p4.quota, p4.ranked = aging.pol.Plan(10)
	aging.mode.plan(aging, &p4)
	require.False(t, p4.fairWatermarks, "aging reads a band in several age windows")
	require.Empty(t, p4.known)
	require.Equal(t, bandTimes{}, p4.after)
}
