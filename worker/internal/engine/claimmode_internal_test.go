package engine

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
		return newQueue(&Engine{}, "q", cfg).mode
	}
	require.IsType(t, orderedMode{}, mode(QueueConfig{}))
	require.IsType(t, orderedMode{}, mode(QueueConfig{Fairness: Fairness{Quotas: map[int]int{2: 1}}}))
	require.IsType(t, &fairMode{}, mode(QueueConfig{Fairness: Fairness{FairShare: true}}))
	require.IsType(t, &permitMode{}, mode(QueueConfig{Limits: []Limit{{MaxRunning: 40}}}))
	require.IsType(t, &permitMode{}, mode(QueueConfig{Limits: []Limit{{MaxRunning: 1_000_000}}}), "permits serve every concurrency-only limit")
	require.IsType(t, &countedMode{}, mode(QueueConfig{Limits: []Limit{{MaxRunning: 1, PerKey: true}}}))
	require.IsType(t, &countedMode{}, mode(QueueConfig{Limits: []Limit{{Rate: 5, Per: time.Second}}}))
	require.IsType(t, &countedMode{}, mode(QueueConfig{Limits: []Limit{{MaxRunning: 40}},
		Fairness: Fairness{Deadline: time.Minute}}), "a ranked policy is not served by permits")
}

// TestCountedModeLearns: the counted mode's state (which limited claim runs next) moves only
// through plan and learn on the loop: exclusive first; striped after a claim far from every
// limit; exclusive again after a claim near a limit; a failed claim changes nothing.
func TestCountedModeLearns(t *testing.T) {
	q := newQueue(&Engine{}, "q", QueueConfig{Claimers: 1, Limits: []Limit{{MaxRunning: 100_000, PerKey: true}}})
	plan := func() claimPlan {
		p := claimPlan{n: 10}
		q.mode.plan(q, &p)
		return p
	}
	learn := func(p claimPlan, f limitedFeedback, err error) {
		q.mode.learn(q, &claimResult{plan: p, fb: claimFeedback{binding: f.Binding, skipped: f.Binding, far: f.far()}, err: err})
	}

	p := plan()
	require.True(t, p.exclusive)

	learn(p, limitedFeedback{MinRoom: stripeFarRoom - 1}, nil)
	require.True(t, plan().exclusive, "not far enough for a striped claim")

	learn(p, limitedFeedback{MinRoom: stripeFarRoom}, nil)
	p = plan()
	require.False(t, p.exclusive, "far from every limit: striped")

	learn(p, limitedFeedback{Binding: true, MinRoom: 1_000_000}, errors.New("claim failed"))
	require.False(t, plan().exclusive, "a failed claim leaves the choice as it was")

	learn(p, limitedFeedback{Binding: true, MinRoom: 1_000_000}, nil)
	require.True(t, plan().exclusive, "a limit held jobs back: exclusive")
}

// TestPermitModeLearns: the permit mode's view of this worker's share is the loop's: a claim
// plans from it, an allocation the claim ran replaces it (also when the claim then failed), a
// claim that found no permit row forgets it.
func TestPermitModeLearns(t *testing.T) {
	q := newQueue(&Engine{}, "q", QueueConfig{Claimers: 2, Concurrency: 10, Limits: []Limit{{MaxRunning: 40}}})
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
