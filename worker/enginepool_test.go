package worker_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
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
		"one queue of 100":         {worker.Config{Queues: map[string]worker.QueueConfig{"a": {Concurrency: 100}}}, 3 + 2 + 1},
		"one large queue":          {worker.Config{Queues: map[string]worker.QueueConfig{"a": {Concurrency: 101}}}, 3 + 2 + 2},
		"large claim batch":        {worker.Config{MaxClaimBatch: 500, Queues: map[string]worker.QueueConfig{"a": {Concurrency: 500}}}, 3 + 2 + 1},
		"one queue, explicit":      {worker.Config{Queues: map[string]worker.QueueConfig{"a": {Concurrency: 10, Claimers: 4}}}, 3 + 2 + 4},
		"100 plain queues":         {worker.Config{Queues: plain(100)}, 3 + 2 + 2},
		"1,000 plain queues":       {worker.Config{Queues: plain(1000)}, 3 + 2 + 2},
		"plain and a limited one":  {worker.Config{Queues: with(plain(100), "lim", worker.QueueConfig{Concurrency: 10, Limits: limit})}, 3 + 2 + 2 + 1},
		"plain and a fair share":   {worker.Config{Queues: with(plain(10), "fair", worker.QueueConfig{Concurrency: 10, Fairness: worker.Fairness{FairShare: true}})}, 3 + 2 + 2 + 1},
		"plain and quotas":         {worker.Config{Queues: with(plain(10), "quota", worker.QueueConfig{Concurrency: 10, Fairness: worker.Fairness{Quotas: map[int]int{2: 1, 3: 3}}})}, 3 + 2 + 2 + 1},
		"plain and a deadline":     {worker.Config{Queues: with(plain(10), "dl", worker.QueueConfig{Concurrency: 10, Fairness: worker.Fairness{Deadline: time.Minute}})}, 3 + 2 + 2 + 1},
		"aging is batched":         {worker.Config{Queues: with(plain(10), "age", worker.QueueConfig{Concurrency: 10, Fairness: worker.Fairness{Aging: &worker.Aging{Step: time.Second}}})}, 3 + 2 + 2},
		"two own-claim queues":     {worker.Config{Queues: map[string]worker.QueueConfig{"a": {Concurrency: 10, Limits: limit}, "b": {Concurrency: 200, Fairness: worker.Fairness{FairShare: true}}}}, 3 + 2 + 1 + 2},
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

// RegisterEngineTypes puts the engine's plans in front of pgx's own: a uuid element of a uuid[]
// parameter is then encoded from its 16 bytes, not through driver.Valuer's string.
func TestRegisterEngineTypes(t *testing.T) {
	m := pgtype.NewMap()
	enc, scan := len(m.TryWrapEncodePlanFuncs), len(m.TryWrapScanPlanFuncs)
	worker.RegisterEngineTypes(m)
	require.Len(t, m.TryWrapEncodePlanFuncs, enc+1)
	require.Len(t, m.TryWrapScanPlanFuncs, scan+1)
	u := uuid.MustParse("0b7f4c4e-6a55-4d5c-9a58-2f0b1f9d3e21")
	buf, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, []uuid.UUID{u}, nil)
	require.NoError(t, err)
	require.Equal(t, u[:], buf[len(buf)-16:], "the element's 16 bytes end the binary array")
}

// A Config.EnginePool of your own, made as the private engine pool is: the engine's session
// settings, its type plans and its default size.
func ExampleRegisterEngineTypes() {
	ctx := context.Background()
	cfg := &worker.Config{Queues: map[string]worker.QueueConfig{"default": {Concurrency: 20}}}
	pc, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	for k, v := range worker.EngineRuntimeParams() {
		pc.ConnConfig.RuntimeParams[k] = v
	}
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		worker.RegisterEngineTypes(c.TypeMap())
		return nil
	}
	n, err := worker.EnginePoolSize(cfg)
	if err != nil {
		panic(err)
	}
	pc.MaxConns = int32(n)
	eng, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		panic(err)
	}
	cfg.EnginePool = eng
	// ... worker.New(appPool, cfg), Register, Start
}
