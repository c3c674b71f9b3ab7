package engine

import (
	"testing"
	"time"
)

// QueueConfig.Batched (which sizes the engine pool, DefaultConns, and routes claims to the
// batcher, useClaimBatch) says exactly what the queue's claim mode and plans say: an ordered
// mode whose plans do not rank.
func TestBatchedMatchesTheClaimMode(t *testing.T) {
	for name, cfg := range map[string]QueueConfig{
		"strict":      {},
		"aging":       {Fairness: Fairness{Aging: &Aging{Step: time.Second}}},
		"quotas":      {Fairness: Fairness{Quotas: map[int]int{1: 1, 2: 3}}},
		"deadline":    {Fairness: Fairness{Deadline: time.Minute}},
		"aging+quota": {Fairness: Fairness{Aging: &Aging{Step: time.Second}, Quotas: map[int]int{2: 1}}},
		"fair share":  {Fairness: Fairness{FairShare: true}},
		"permits":     {Limits: []Limit{{MaxRunning: 5}}},
		"counted":     {Limits: []Limit{{MaxRunning: 5, PerKey: true}}},
		"rate":        {Limits: []Limit{{Rate: 10, Per: time.Second}}},
	} {
		cfg.Concurrency, cfg.Claimers = 4, 1
		q := newQueue(&Engine{}, "q", cfg)
		_, ordered := q.mode.(orderedMode)
		_, _, ranked := q.pol.Plan(4)
		if want := ordered && !ranked; cfg.Batched() != want {
			t.Errorf("%s: Batched() = %v, but the mode is %T and its plans rank: %v", name, cfg.Batched(), q.mode, ranked)
		}
	}
}
