package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/worker"
)

// The private engine pool's default size: a connection per claimer only for the queues that
// claim with statements of their own; the queues whose claims the batcher carries share its 2.
func TestEnginePoolSizeDefault(t *testing.T) {
	plain := func(n int) map[string]worker.QueueConfig {
		qs := map[string]worker.QueueConfig{}
		for i := range n {
			qs[fmt.Sprintf("q%03d", i)] = worker.QueueConfig{Concurrency: 1}
		}
		return qs
	}
	with := func(qs map[string]worker.QueueConfig, name string, q worker.QueueConfig) map[string]worker.QueueConfig {
		qs[name] = q
		return qs
	}
	limit := []worker.Limit{{MaxRunning: 5}}
	for name, tc := range map[string]struct {
		cfg  worker.Config
		want int
	}{
		// 3 (LISTEN, heartbeat, reclaim/prune) + 2 finishers + the claimers
		"one small queue":          {worker.Config{Queues: map[string]worker.QueueConfig{"a": {Concurrency: 10}}}, 3 + 2 + 1},
		"one large queue":          {worker.Config{Queues: map[string]worker.QueueConfig{"a": {Concurrency: 100}}}, 3 + 2 + 2},
		"one queue, explicit":      {worker.Config{Queues: map[string]worker.QueueConfig{"a": {Concurrency: 10, Claimers: 4}}}, 3 + 2 + 4},
		"100 plain queues":         {worker.Config{Queues: plain(100)}, 3 + 2 + 2},
		"1,000 plain queues":       {worker.Config{Queues: plain(1000)}, 3 + 2 + 2},
		"plain and a limited one":  {worker.Config{Queues: with(plain(100), "lim", worker.QueueConfig{Concurrency: 10, Limits: limit})}, 3 + 2 + 2 + 1},
		"plain and a fair share":   {worker.Config{Queues: with(plain(10), "fair", worker.QueueConfig{Concurrency: 10, Fairness: worker.Fairness{FairShare: true}})}, 3 + 2 + 2 + 1},
		"plain and quotas":         {worker.Config{Queues: with(plain(10), "quota", worker.QueueConfig{Concurrency: 10, Fairness: worker.Fairness{Quotas: map[int]int{2: 1, 3: 3}}})}, 3 + 2 + 2 + 1},
		"plain and a deadline":     {worker.Config{Queues: with(plain(10), "dl", worker.QueueConfig{Concurrency: 10, Fairness: worker.Fairness{Deadline: time.Minute}})}, 3 + 2 + 2 + 1},
		"aging is batched":         {worker.Config{Queues: with(plain(10), "age", worker.QueueConfig{Concurrency: 10, Fairness: worker.Fairness{Aging: &worker.Aging{Step: time.Second}}})}, 3 + 2 + 2},
		"two own-claim queues":     {worker.Config{Queues: map[string]worker.QueueConfig{"a": {Concurrency: 10, Limits: limit}, "b": {Concurrency: 100, Fairness: worker.Fairness{FairShare: true}}}}, 3 + 2 + 1 + 2},
		"finishers count":          {worker.Config{Finishers: 4, Queues: plain(3)}, 3 + 4 + 2},
		"EngineConns is respected": {worker.Config{EngineConns: 40, Queues: plain(100)}, 40},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := worker.EnginePoolSize(&tc.cfg)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := worker.EnginePoolSize(&worker.Config{EngineConns: -1})
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
}

// A worker serving three plain queues shares the claim batcher's two connections among them.
func ExampleEnginePoolSize() {
	n, err := worker.EnginePoolSize(&worker.Config{Queues: map[string]worker.QueueConfig{
		"emails": {}, "webhooks": {}, "reports": {},
	}})
	if err != nil {
		panic(err)
	}
	fmt.Println(n)
	// Output: 7
}
