package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClaimModeChoice: each configuration gets the one mode that serves it (claimmode.go).
func TestClaimModeChoice(t *testing.T) {
	mode := func(cfg QueueConfig) claimMode {
		cfg.Claimers = 1
		return newQueue(&Worker{}, "q", cfg).mode
	}
	require.IsType(t, orderedMode{}, mode(QueueConfig{}))
	require.IsType(t, orderedMode{}, mode(QueueConfig{Fairness: Fairness{Quotas: map[int]int{2: 1}}}))
	require.IsType(t, &fairMode{}, mode(QueueConfig{Fairness: Fairness{FairShare: true}}))
	require.IsType(t, &permitMode{}, mode(QueueConfig{Limits: []Limit{{MaxRunning: 40}}}))
	require.IsType(t, &countedMode{}, mode(QueueConfig{Limits: []Limit{{MaxRunning: permitMaxRunning + 1}}}))
	require.IsType(t, &countedMode{}, mode(QueueConfig{Limits: []Limit{{MaxRunning: 1, PerKey: true}}}))
	require.IsType(t, &countedMode{}, mode(QueueConfig{Limits: []Limit{{Rate: 5, Per: time.Second}}}))
	require.IsType(t, &countedMode{}, mode(QueueConfig{Limits: []Limit{{MaxRunning: 40}},
		Fairness: Fairness{Deadline: time.Minute}}), "a ranked policy is not served by permits")
}

// TestCountedModeLearns: the counted mode's state (which limited claim runs next) moves only
// through plan and learn on the loop: exclusive first; striped after a claim far from every
// limit; a grant claim once an exclusive claim granted; back to exclusive after a claim near a
// limit; and a grant claim whose exclusive follow-up failed still ends granting (its stripe's
// budget was spent) while the failed claim leaves far as it was.
func TestCountedModeLearns(t *testing.T) {
	q := newQueue(&Worker{}, "q", QueueConfig{Claimers: 1, Limits: []Limit{{MaxRunning: 100_000}}})
	m := q.mode.(*countedMode)
	plan := func() claimPlan {
		p := claimPlan{n: 10}
		q.mode.plan(q, &p)
		return p
	}
	learn := func(p claimPlan, fb claimFeedback, err error) {
		q.mode.learn(q, &claimResult{plan: p, fb: fb, err: err})
	}

	p := plan()
	require.True(t, p.exclusive)
	require.False(t, p.grant)

	// An exclusive claim far from the limit that did not grant: striped next.
	learn(p, limitResult{grantable: true, exclusive: true, n: 10, minRoom: stripeFarRoom, setGranting: true}.feedback(), nil)
	p = plan()
	require.False(t, p.exclusive)
	require.False(t, p.grant)

	// An exclusive claim that granted: grant claims next.
	learn(plan(), limitResult{grantable: true, exclusive: true, n: 10, granted: grantMin, setGranting: true}.feedback(), nil)
	p = plan()
	require.False(t, p.exclusive)
	require.True(t, p.grant)
	require.True(t, m.granting)

	// The grant claim ran short, and its exclusive follow-up failed: not granting any more;
	// far unchanged by the failure.
	learn(p, claimFeedback{setGranting: true, granting: false}, errors.New("follow-up failed"))
	require.False(t, m.granting)
	require.True(t, m.far)
	p = plan()
	require.False(t, p.exclusive)
	require.False(t, p.grant, "striped, not a grant claim")

	// A claim a limit held back: exclusive next.
	learn(p, limitResult{binding: true, skipped: true, n: 10}.feedback(), nil)
	require.True(t, plan().exclusive)

	// A ranked policy never grant-claims.
	m.far, m.granting = true, true
	r := claimPlan{n: 10, ranked: true}
	q.mode.plan(q, &r)
	require.False(t, r.grant)
}

// TestPermitModeLearns: the permit mode's view of this worker's share is the loop's: a claim
// plans from it, an allocation the claim ran replaces it (also when the claim then failed), a
// claim that found no permit row forgets it.
func TestPermitModeLearns(t *testing.T) {
	q := newQueue(&Worker{}, "q", QueueConfig{Claimers: 2, Concurrency: 10, Limits: []Limit{{MaxRunning: 40}}})
	p := claimPlan{n: 10}
	q.mode.plan(q, &p)
	require.True(t, p.exclusive, "a permit claim's limited finishes do not linger")
	require.False(t, p.permit.have, "no share yet: the claim allocates first")

	at := time.Unix(1000, 0)
	q.mode.learn(q, &claimResult{plan: p, fb: claimFeedback{alloc: &permitAlloc{have: true, amount: 7, owed: true, last: at}},
		err: errors.New("claim after the allocation failed")})
	p2 := claimPlan{n: 10}
	q.mode.plan(q, &p2)
	require.Equal(t, permitView{have: true, amount: 7, owed: true, last: at}, p2.permit)
	require.True(t, p2.permit.mayGrow(10, at.Add(permitOwedRegrow)))

	q.mode.learn(q, &claimResult{plan: p2, fb: claimFeedback{lostPermit: true}})
	p3 := claimPlan{n: 10}
	q.mode.plan(q, &p3)
	require.False(t, p3.permit.have)
	require.Equal(t, int32(7), p3.permit.amount)
}
