package tenurenats_test

// Child processes for the kill tests: the test binary re-executed through testkit.StartChild.
// Role "relay" runs a Relay that stops dead (blocks, to be SIGKILLed) at the step named by
// TENURE_NATS_KILL_AT: "publish" (messages handed to the connection, no acknowledgement
// awaited), "ack" (acknowledgements received, nothing marked) or "commit" (rows marked sent
// in a transaction that has not committed). Role "worker" runs a JetStream Worker whose
// handler blocks after printing "started <seq> <attempt>".

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/tenurenats"
	"github.com/tenureq/tenure/worker"
)

const (
	envChildDB     = "TENURE_NATS_CHILD_DB"
	envChildStream = "TENURE_NATS_CHILD_STREAM"
	envChildPrefix = "TENURE_NATS_CHILD_PREFIX"
	envChildKillAt = "TENURE_NATS_KILL_AT"
	envChildLease  = "TENURE_NATS_CHILD_LEASE_MS"
)

func childMain(role string) int {
	testkit.ExitOnStdinEOF()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(envChildDB))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	nc, err := nats.Connect(natsURL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	leaseMS, _ := strconv.Atoi(os.Getenv(envChildLease))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	switch role {
	case "relay":
		return childRelay(ctx, pool, js, time.Duration(leaseMS)*time.Millisecond, logger)
	case "worker":
		return childWorker(ctx, pool, js, time.Duration(leaseMS)*time.Millisecond, logger)
	}
	fmt.Fprintln(os.Stderr, "unknown child role", role)
	return 2
}

func childRelay(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, lease time.Duration, logger *slog.Logger) int {
	block := func(at string) func([]int64) {
		if os.Getenv(envChildKillAt) != at {
			return nil
		}
		return func(ids []int64) {
			testkit.ChildPrintf("at %s %d", at, len(ids))
			select {} // wait for SIGKILL
		}
	}
	cfg := &tenurenats.RelayConfig{Stream: os.Getenv(envChildStream), Batch: 100, Pipelines: 1, Lease: lease,
		PublishTimeout: lease / 2, Logger: logger}
	tenurenats.SetRelayHooks(cfg, block("publish"), block("ack"), block("commit"))
	r, err := tenurenats.NewRelay(pool, js, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	testkit.ChildPrintf("ready %d", os.Getpid())
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

const envChildRemote = "TENURE_NATS_CHILD_REMOTE"

// childWorker runs a JetStream worker whose handler applies the "send" effect through
// worker.Effect, prints "effect-done <seq> <attempt>" and blocks until killed.
func childWorker(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, lease time.Duration, logger *slog.Logger) int {
	prefix := os.Getenv(envChildPrefix)
	w, err := tenurenats.NewWorker(js, &tenurenats.Config{Stream: os.Getenv(envChildStream), SubjectPrefix: prefix + ".jobs",
		DeadLetterPrefix: prefix + ".dead", Pool: pool, FetchWait: 200 * time.Millisecond, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	remote := os.Getenv(envChildRemote)
	err = tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		r, err := worker.Effect(ctx, job.JobRow, "send", func(ctx context.Context, call worker.EffectCall) (string, error) {
			return testkit.CallRemote(ctx, remote, call.Key, call.Generation)
		})
		if err != nil {
			testkit.ChildPrintf("effect-err %d %v", job.ID, err)
			return err
		}
		testkit.ChildPrintf("effect-done %d %d %s", job.ID, job.Attempt, r.Value)
		select {} // wait for SIGKILL
	}, &worker.HandlerOptions{Lease: lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	testkit.ChildPrintf("ready %d", os.Getpid())
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}
