package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
)

// Config is the engine's configuration: what worker.New makes of the public worker.Config
// once it validated it and filled its defaults (worker/config.go documents every field). The
// engine reads it and never changes it.
type Config struct {
	ID       string
	Queues   map[string]QueueConfig
	Registry *generics.Registry
	Logger   *slog.Logger
	Schema   *dbschema.Schema

	EnginePool         *pgxpool.Pool
	AsynchronousCommit bool
	EngineConns        int

	FetchPollMin, FetchPollMax time.Duration
	MaxClaimBatch              int
	// Slots: the worker-wide slot pool's size (slotpool.go); 0: none.
	Slots          int
	MaxFinishBatch int
	Finishers      int
	FinishLinger   time.Duration

	HeartbeatDivisor int
	StuckGrace       time.Duration
	ReclaimEvery     time.Duration
	ReclaimBatch     int

	FinishedRetention, DeadRetention time.Duration
	PruneEvery                       time.Duration
	RegistryEvery                    time.Duration
	ShutdownTimeout                  time.Duration
	EffectKeyPrefix                  string
	HardStopGrace                    time.Duration
	// OnOutcome, when set, is called on the queue's loop after every attempt's finish was
	// written, rejected or abandoned (package worker converts it to its Outcome).
	OnOutcome       func(Outcome)
	FinishRetryMax  time.Duration
	Periodic        []*Periodic
	QueueStateEvery time.Duration

	// CheckDatabase, when set, runs at Start on the engine's pool once it answers, before
	// anything else: package worker checks the role's privileges and the schema's version.
	CheckDatabase func(ctx context.Context, pool *pgxpool.Pool) error
}

// QueueConfig is one queue's configuration (worker.QueueConfig, validated and defaulted).
type QueueConfig struct {
	Concurrency int
	Fairness    Fairness
	Claimers    int
	// ClaimAhead: at most this many jobs claimed beyond the free slots (ahead.go); 0: none.
	ClaimAhead int
	Limits     []Limit
}

// Batched reports whether the queue's claims are plain ordered ones, which the claim batcher
// carries when the worker serves several queues (claimbatch.go: useClaimBatch routes by it):
// no limits, no fair share, no quotas or deadline. Other queues claim with
// statements of their own, one per claimer in flight.
func (q QueueConfig) Batched() bool {
	return len(q.Limits) == 0 && !q.Fairness.FairShare && !q.Fairness.Ranked()
}

// DefaultConns is the size of the private engine pool when worker.Config.EngineConns is 0:
// 3 (LISTEN, heartbeat, reclaim and prune) plus one per finisher, one per claimer of every
// queue that claims with its own statements, and claimBatchInFlight for all the queues whose
// claims the batcher carries (they share its statements). A connection per batched queue
// bought nothing: with 100 one-slot queues, 1 or 2 claim statements and 1 or 2 completions
// were in flight at any moment (sampled from pg_stat_activity: 37 of 43 connections idle for
// more than 5 s), and the default was then 105 connections per worker, more than PostgreSQL's
// default max_connections.
func DefaultConns(queues []QueueConfig, finishers int) int {
	n := 3 + finishers
	batched := false
	for _, q := range queues {
		if len(queues) > 1 && q.Batched() {
			batched = true
			continue
		}
		n += q.Claimers
	}
	if batched {
		n += claimBatchInFlight
	}
	return n
}

// Limit is one flow-control limit of a queue (worker.Limit, validated).
type Limit struct {
	Kind             string
	PerKey           bool
	MaxRunning       int
	Rate             int
	Per              time.Duration
	RetryAfterPauses bool
}

// KindOptions are the options of a registered kind the engine reads (worker.HandlerOptions
// merged with the kind's declared defaults and defaulted).
type KindOptions struct {
	Timeout     time.Duration
	Lease       time.Duration
	MaxAttempts int
	Queue       string
	Priority    int
	MaxSnoozes  int
	// DeleteOnSuccess: a success deletes the job's row (its fenced finish does).
	DeleteOnSuccess bool
	// Retry is the kind's retry policy (worker.RetryPolicy.Delay).
	Retry func(attempt int, code ErrorCode) time.Duration
}

// Handler is one registered kind, as the engine runs it. Package worker builds it (Register,
// RegisterBatch): run decodes the payload and calls the application's handler inside its
// middleware; the engine classifies what it returns (execute.go).
type Handler struct {
	kind    string
	version int // the newest payload version the args type knows
	opts    KindOptions
	run     func(ctx context.Context, e *Execution) error
	batch   *batchSpec // a batch kind (NewBatchHandler, batch.go): run is nil
}

// NewHandler returns the handler of kind (payload version version): run is called with the
// attempt's context and its execution (Execution.Job is the row the handler sees).
func NewHandler(kind string, version int, opts KindOptions, run func(ctx context.Context, e *Execution) error) *Handler {
	return &Handler{kind: kind, version: version, opts: opts, run: run}
}

// Kind returns the handler's kind.
func (h *Handler) Kind() string { return h.kind }
