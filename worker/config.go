package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// Config configures a Worker. A nil *Config, or zero fields, mean the documented defaults.
type Config struct {
	// ID names this worker process in locked_by and logs. Default: hostname-pid-random.
	ID string
	// Queues to work, with their concurrency and fairness. Default: {"default": {}}. With more
	// than one queue, the plain ordered claims of all of them (no fair share, no limits, no
	// quotas or deadlines) are claimed together, one statement for many queues
	// (docs/design.md, "Claim batcher"); each queue keeps its own slots, order and pause.
	Queues map[string]QueueConfig
	// Registry holds the kinds. Default: a new registry (see Worker.Registry).
	Registry *generics.Registry
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Schema is the PostgreSQL schema holding Tenure's tables, migrated into it with
	// migrations.NewRunner(migrations.Options{Schema: ...}). Default "tenure". A worker works
	// the jobs of its schema only, listens on that schema's NOTIFY channels and takes that
	// schema's advisory locks: workers of two schemas share nothing (docs/guide.md, "A schema
	// of your own"). An invalid name is refused by New with an error wrapping
	// ErrInvalidConfig and a *migrations.InvalidSchemaError (migrations.ErrInvalidSchema).
	Schema string

	// EnginePool is the pool the engine's own statements (claim, heartbeat, finish, reclaim,
	// LISTEN) use. Default: a private pool of EngineConns connections made from the handlers'
	// pool configuration, so handlers holding every connection of their pool never starve
	// heartbeats or completions. A pool given here is used as it is: give its connections
	// EngineRuntimeParams (generic plans, no sequential scans, no JIT: why in
	// internal/engineconf), or the engine's statements may plan and run worse.
	EnginePool *pgxpool.Pool
	// AsynchronousCommit lets the engine's own transactions (claims, heartbeats, finishes,
	// reclaims) commit with synchronous_commit=off: faster (no wait for the WAL flush), at a
	// price a crash of the database server makes you pay. By default (false) they commit with
	// the server's setting, durably. With it on, a crash can lose the last fraction of a
	// second of those changes (up to three times wal_writer_delay, 200 ms by default):
	//   - a claim can be lost after its handler started, so the job runs again with the same
	//     generation (another claim token): Generation is then not unique per attempt, and a
	//     remote fencing on it must also compare EffectCall.ClaimToken;
	//   - a finish can be lost after OnOutcome reported it (Err == nil): the job runs again
	//     once its lease expires, so counting OnOutcome successes can double-count.
	// Fencing still lets only the current claim token finish a job, and nothing is lost.
	// Enqueues, effect-ledger records and CompleteTx use the application's pool and
	// transactions and are never affected. Only applies to the private engine pool (set
	// synchronous_commit yourself on Config.EnginePool).
	AsynchronousCommit bool
	// EngineConns sizes the private engine pool. Default 3 (LISTEN, heartbeat, reclaim and
	// prune) plus one per finisher, one per claimer of every queue that claims with its own
	// statements (a worker's only queue, or a queue with Limits, FairShare, Quotas or a
	// Deadline), 2 for all the other queues of a worker serving several (one statement
	// carries the claims of many queues: their claims share 2 connections), and one more
	// with Periodic jobs. EnginePoolSize returns it (size a Config.EnginePool of your own
	// with it). Before, every queue counted its claimers: 105 connections for 100 plain
	// queues, of which the engine kept 5 or 6 busy.
	EngineConns int

	// FetchPollMax is the longest wait between claims of an idle queue; empty claims back off
	// with jitter from FetchPollMin doubling to FetchPollMax. Defaults 100ms and 2s.
	FetchPollMin, FetchPollMax time.Duration
	// MaxClaimBatch bounds one claim (it is also bounded by the queue's free slots). Default 100.
	MaxClaimBatch int
	// Slots, when positive, is a worker-wide pool of handler slots that the queues share: all
	// queues together run at most Slots handlers, and each queue still at most its own
	// QueueConfig.Concurrency (its cap). A worker serving many queues with little work each can
	// then give a busy queue more than an even split, so one claim takes several of its jobs
	// instead of one job per round trip. Slots freed while other queues wait for some go to
	// them in turn (round-robin, at most max(1, Slots/8) slots per turn), so a busy queue
	// cannot starve a quiet one (docs/guide.md, "Many queues"). Default 0: no pool, each queue
	// has its Concurrency slots to itself. At most 100000.
	Slots int
	// MaxFinishBatch bounds one batched completion write. Default 500.
	MaxFinishBatch int
	// Finishers is the number of batched finish writes that may be in flight at once; each
	// takes whatever finishes accumulated while the others wrote. Default 2.
	Finishers int
	// FinishLinger is how long the engine holds a batch of fewer than 16 finishes, counted from
	// its first, waiting for more before a finisher writes them. At low load, when jobs finish
	// one at a time, it turns one completion statement per job into one per batch (at 200
	// jobs/s and 20 ms: about 4.7 jobs per statement), which was most of the database's CPU per
	// job; a job's final state lands at most FinishLinger later (its handler slot is free at
	// once, and its lease is heartbeated meanwhile). Under load batches fill while the previous
	// write is in flight and nothing waits. Default 20ms; negative disables it (every finish is written at once).
	// A success first waits for its queue's next claim, which completes it in the claim's own
	// transaction (one commit for both); it is handed to the finishers at once when no claim
	// of the queue is in flight, and at the latest FinishLinger after its handler returned
	// (then written without lingering again). Stats.FinishedOnClaims counts those that rode.
	FinishLinger time.Duration

	// HeartbeatDivisor sets how often running jobs are heartbeated, as a fraction of their lease:
	// each job every lease/HeartbeatDivisor. Default divisor 3.
	HeartbeatDivisor int
	// StuckGrace is how long past its timeout a handler that ignores its context may keep its
	// job before the engine stops heartbeating it (its lease then expires and it is reclaimed)
	// and counts it stuck. Default 10s.
	StuckGrace time.Duration
	// ReclaimEvery is the lease-expiry sweep period (each pass bounded by ReclaimBatch jobs).
	// Defaults 1s and 1000.
	ReclaimEvery time.Duration
	ReclaimBatch int

	// Retention of final jobs: succeeded and cancelled jobs are deleted FinishedRetention after
	// they finished, dead jobs DeadRetention after. Defaults 24h and 7 days; negative disables.
	FinishedRetention, DeadRetention time.Duration
	// PruneEvery is the pruning period. Default 1 minute.
	PruneEvery time.Duration

	// RegistryEvery is how often the worker writes its row in the worker registry
	// (tenure.workers: host, pid, queues, heartbeat, last success, counters; read it with
	// jobs.Client.Workers). The row expires RegistryTTLIntervals intervals after its last
	// write; other workers then delete it. Stop deletes it. Default 5s; negative disables.
	RegistryEvery time.Duration

	// ShutdownTimeout is the budget of the graceful stop that cancelling Start's context
	// begins (for example on SIGINT/SIGTERM through signal.NotifyContext): as if Stop were
	// called with a deadline ShutdownTimeout away. Nothing new is claimed, running handlers
	// may finish, and HardStopGrace before the deadline the ones still running are cancelled
	// and their jobs released (attempt not charged). A Stop call with an earlier deadline
	// tightens it. Default 30s. Negative: cancelling Start's context hard-stops at once
	// (handlers cancelled immediately, the whole stop within HardStopGrace).
	ShutdownTimeout time.Duration
	// EffectKeyPrefix is put in front of every effect key this worker's handlers use
	// (prefix + "job:{id}:effect:{name}"), in the ledger and in EffectCall.Key: two
	// environments (staging and production databases) that share one remote account then
	// never send the same idempotency key for different jobs with the same id. At most 64
	// bytes of valid UTF-8 without NUL; keep it fixed for the life of a database, or retries
	// of jobs started under another prefix repeat their effects. Default "" (no prefix).
	EffectKeyPrefix string

	// HardStopGrace is the part of Stop's time kept for the hard stop: handler contexts are
	// cancelled HardStopGrace before Stop's deadline (at most half the time Stop was given),
	// and the jobs of handlers that still have not returned are released a quarter into it.
	// Default 5s.
	HardStopGrace time.Duration
	// OnOutcome, when set, is called after every attempt's fenced finish was written or
	// rejected (Outcome.Err is a *StaleWriteError then) or abandoned (ErrFinishAbandoned). It
	// runs on the queue's loop goroutine: keep it fast and never block in it.
	OnOutcome func(Outcome)
	// FinishRetryMax bounds the backoff between retries of a finish that failed with a
	// retryable error (connection lost, server restarting or read-only, serialization
	// failure). The same fenced write is retried at most 10 times, and not past the job's
	// lease. Default 2s.
	FinishRetryMax time.Duration
	// Middleware wraps every handler, Middleware[0] outermost (see Middleware): the seam for
	// tracing (package tenureotel), logging or metrics around attempts. Default none. Per-kind
	// middleware goes in HandlerOptions.Middleware (inside these; docs/guide.md §13 has the
	// order of every hook).
	Middleware []Middleware

	// Periodic lists the periodic jobs (cron or interval schedules) this worker enqueues; build
	// them with NewPeriodicJob. Workers that list the same name share the schedule and each tick
	// is enqueued once between them (see PeriodicJob). A schedule's kind must be registered in
	// Registry by Start. Default none.
	Periodic []PeriodicJob
	// QueueStateEvery is how often the worker reads which of its queues an operator paused
	// (jobs.Client.PauseQueue), as a backstop for the NOTIFY that tells it at once. Default 1s.
	QueueStateEvery time.Duration
}

// QueueConfig configures one queue.
type QueueConfig struct {
	// Concurrency is the number of handlers running at once for this queue. Default 10.
	Concurrency int
	// Fairness decides which ready jobs a claim takes. The zero value is strict priority.
	Fairness Fairness
	// Claimers is the number of claim statements the queue may have in flight at once (each
	// for slots the others did not reserve). Two keep a pool that one claim cannot fill (more
	// slots than MaxClaimBatch) fed while a claim's round trip is in flight. Default 1 when
	// Concurrency <= MaxClaimBatch (one claim takes every slot freed during the previous
	// round trip; a second would walk the rows the first holds, costing PostgreSQL about
	// twice the time per job), else 2.
	Claimers int
	// ClaimAhead lets the queue hold up to this many jobs claimed beyond its free slots, each
	// started when a slot frees, so that a freed slot does not wait for a claim's round trip:
	// for queues of short handlers on few slots, where that wait is most of a slot's time. The
	// queue claims ahead only what its handlers are expected to free during one claim's round
	// trip (measured: running handlers × claim time / handler time, so long handlers claim
	// nothing ahead), and a job that finds no slot within 1 s goes back to ready, its attempt not
	// charged; Stop gives waiting jobs back at once, and an operator's cancel ends a waiting job
	// without running it. A waiting job's timeout starts with its handler; its lease starts
	// with its claim and is heartbeated while it waits. The cost, and why it is off by default:
	// a claim may take more than the free slots (the contract's bound, docs/contract.md §1), so
	// a worker that dies strands up to ClaimAhead more jobs until their leases expire. Not used
	// with Limits or a worker-wide slot pool (Config.Slots). Default 0: off. Measured (8 slots
	// × 1 ms jobs, durable commits): docs/benchmarks.md, "Few workers".
	ClaimAhead int
	// Limits bound the queue's jobs cluster-wide: how many run at once and how many start per
	// period, per kind, for the whole queue, or per concurrency key (see Limit, and
	// docs/guide.md "Flow control"). Every worker serving the queue must configure the same
	// limits. Limits work with every Fairness policy. Default none: the queue claims without any
	// flow-control cost. A queue whose limits are all MaxRunning (no PerKey, no Rate) of at
	// most 1,000, under strict or aging fairness, splits them into per-worker shares (up to
	// Concurrency each) and claims within its share without waiting for other workers
	// ("permits", worker/permits.go); a gracefully stopped worker gives its shares back, a dead
	// one's come back 10 s after its last claim.
	Limits []Limit
}

// HandlerOptions are per-kind options. A nil *HandlerOptions, or zero fields, mean defaults.
type HandlerOptions struct {
	// Timeout bounds one attempt: the handler's context ends with cause ErrHandlerTimeout and
	// the attempt fails with code TIMEOUT. Default 1 minute.
	Timeout time.Duration
	// Retry computes the delay before the next attempt. Default FullJitter{Base: 1s, Cap: 1h}.
	Retry RetryPolicy
	// Lease, MaxAttempts, Queue and Priority are the kind's enqueue defaults, recorded in the
	// registry: a jobs.Client built with this worker's Registry applies them. The lease is
	// stored on the job and used at claim and heartbeat. Defaults: 30s, 25, "default", 2.
	//
	// When the args type declares its defaults (generics.ArgsWithDefaults), Register fills
	// the zero Timeout, Retry, Lease, MaxAttempts, Queue and Priority from them, and refuses a
	// non-zero value that differs (ErrDefaultsConflict): declare a kind's defaults once, with
	// its args type (docs/guide.md §9). The worker publishes the result for tenure.enqueue.
	Lease       time.Duration
	MaxAttempts int
	Queue       string
	Priority    int
	// Upgraders convert payloads stored by older versions of the args type.
	Upgraders []generics.Upgrader
	// Middleware wraps this kind's handler only, inside Config.Middleware (Middleware[0]
	// outermost of these). Default none.
	Middleware []Middleware
	// MaxSnoozes bounds how often one job of the kind may snooze (return Snooze). A snooze
	// past it is a failed attempt (code SNOOZE_LIMIT, retried with the retry policy's delay
	// while attempts remain, then dead), so a job cannot snooze forever. Default
	// DefaultMaxSnoozes; at most 1,000,000.
	MaxSnoozes int
	// DeleteOnSuccess deletes a job of the kind when it succeeds: its fenced finish (the
	// batched CompleteMany, or CompleteTx) deletes the row, with its effect-ledger rows,
	// instead of writing a succeeded row for pruning to delete later. Failed attempts, dead and
	// cancelled jobs keep their rows. Workflow tasks, sequence jobs and jobs whose unique
	// states include succeeded keep their rows too (their dependents, DependencyOutput and the
	// unique key read them). A deleted job has no stored output: jobs.Client.Wait reports it
	// succeeded, jobs.WaitOutput returns jobs.ErrOutputNotKept. Chosen per kind, not per
	// queue: whether anyone needs a succeeded job's row (its output, its history) is a
	// property of the kind. Default false (docs/guide.md §28). The args type can declare it
	// (generics.KindDefaults.DeleteOnSuccess); Register refuses it with a declared unique
	// over succeeded (generics.ErrDeleteOnSuccessUnique).
	DeleteOnSuccess bool
}

// DefaultMaxSnoozes is HandlerOptions.MaxSnoozes's default.
const DefaultMaxSnoozes = 100

const (
	defaultConcurrency = 10
	defaultTimeout     = time.Minute
)

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.ID == "" {
		host, _ := os.Hostname()
		out.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomSuffix())
	}
	if len(out.ID) > 200 {
		return out, fmt.Errorf("%w: ID longer than 200 bytes", ErrInvalidConfig)
	}
	if len(out.Queues) == 0 {
		out.Queues = map[string]QueueConfig{jobs.DefaultQueue: {}}
	}
	if out.MaxClaimBatch == 0 { // before the queues: their default Claimers read it
		out.MaxClaimBatch = 100
	}
	queues := make(map[string]QueueConfig, len(out.Queues))
	for name, q := range out.Queues {
		if !jobs.ValidQueueName(name) {
			return out, fmt.Errorf("%w: queue name %q", ErrInvalidConfig, name)
		}
		if q.Concurrency < 0 || q.Concurrency > 10000 {
			return out, fmt.Errorf("%w: queue %q: Concurrency %d outside 0..10000", ErrInvalidConfig, name, q.Concurrency)
		}
		if q.Concurrency == 0 {
			q.Concurrency = defaultConcurrency
		}
		if q.Claimers < 0 || q.Claimers > 16 {
			return out, fmt.Errorf("%w: queue %q: Claimers %d outside 0..16", ErrInvalidConfig, name, q.Claimers)
		}
		if q.Claimers == 0 {
			// One claim in flight takes every slot freed during the previous round trip, up
			// to MaxClaimBatch; a second only helps a pool one claim cannot fill. Two claims
			// of one queue in flight at once collide: both plan from the same watermark, so the
			// second walks the rows the first holds (FOR UPDATE SKIP LOCKED tries and skips
			// each) and the index entries it leaves behind. Measured (issue 32):
			//   - few-workers (8 slots x 1 ms): 1.9 jobs a claim with three in flight, 3.9 with
			//     one; a third of the postgres CPU per job, 2.4x the jobs/s on a busy machine.
			//   - batch burn-down, single-job handlers, 100 slots: 17.4k jobs/s with one claimer
			//     (2 runs) against 14.8k and 16.4k with two; database statement time per 1,000
			//     jobs 0.027 s against 0.062-0.066 s (four claimers: 0.20 s). At 300 slots (three
			//     claims of 100 fill the pool) two were faster: 20.1-20.4k against 17.3-19.0k.
			//   - bench compare quick (100 workers, against River in the same run, alternated
			//     with the previous default of two, four pairs): postgres CPU per 1,000 jobs
			//     -15 to -31 % in burn-down, -9 to -21 % in steady; throughput within the
			//     runs' noise (bench/results/2026-12-05-claimers.md).
			q.Claimers = 2
			if q.Concurrency <= out.MaxClaimBatch {
				q.Claimers = 1
			}
			q.Claimers = min(q.Claimers, q.Concurrency)
		}
		if q.ClaimAhead < 0 || q.ClaimAhead > 10000 {
			return out, fmt.Errorf("%w: queue %q: ClaimAhead %d outside 0..10000", ErrInvalidConfig, name, q.ClaimAhead)
		}
		if err := q.Fairness.validate(name); err != nil {
			return out, err
		}
		if err := validateLimits(name, q); err != nil {
			return out, err
		}
		if q.Fairness.FairShare && len(q.Limits) > 0 {
			return out, fmt.Errorf("%w: %w: queue %q", ErrInvalidConfig, ErrFairShareWithLimits, name)
		}
		queues[name] = q
	}
	out.Queues = queues
	if out.Registry == nil {
		out.Registry = generics.NewRegistry()
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Finishers == 0 {
		out.Finishers = 2
	}
	if out.Finishers < 1 || out.Finishers > 16 {
		return out, fmt.Errorf("%w: Finishers outside 1..16", ErrInvalidConfig)
	}
	if len(out.EffectKeyPrefix) > 64 || !utf8.ValidString(out.EffectKeyPrefix) || strings.IndexByte(out.EffectKeyPrefix, 0) >= 0 {
		return out, fmt.Errorf("%w: EffectKeyPrefix must be at most 64 bytes of valid UTF-8 without NUL", ErrInvalidConfig)
	}
	if out.EngineConns < 0 {
		return out, fmt.Errorf("%w: EngineConns must be >= 0", ErrInvalidConfig)
	}
	if out.EngineConns == 0 {
		qs := make([]engine.QueueConfig, 0, len(out.Queues))
		for _, q := range out.Queues {
			qs = append(qs, q.engine())
		}
		out.EngineConns = engine.DefaultConns(qs, out.Finishers)
	}
	if len(out.Periodic) > 0 && c != nil && c.EngineConns == 0 {
		out.EngineConns++ // the periodic service's enqueue transactions
	}
	if out.EngineConns < 3 {
		return out, fmt.Errorf("%w: EngineConns %d cannot hold LISTEN plus claims and finishes (need >= 3)", ErrInvalidConfig, out.EngineConns)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&out.FetchPollMin, 100*time.Millisecond)
	def(&out.FetchPollMax, 2*time.Second)
	def(&out.StuckGrace, 10*time.Second)
	def(&out.ReclaimEvery, time.Second)
	def(&out.FinishedRetention, 24*time.Hour)
	def(&out.DeadRetention, 7*24*time.Hour)
	def(&out.PruneEvery, time.Minute)
	def(&out.RegistryEvery, 5*time.Second)
	def(&out.HardStopGrace, 5*time.Second)
	def(&out.ShutdownTimeout, 30*time.Second)
	def(&out.FinishRetryMax, 2*time.Second)
	def(&out.QueueStateEvery, time.Second)
	if out.QueueStateEvery < 10*time.Millisecond {
		return out, fmt.Errorf("%w: QueueStateEvery below 10ms", ErrInvalidConfig)
	}
	if len(out.Periodic) > 0 {
		ps := make([]PeriodicJob, len(out.Periodic))
		seen := map[string]bool{}
		for i, p := range out.Periodic {
			if err := p.validate(); err != nil {
				return out, fmt.Errorf("%w: %w: %w", ErrInvalidConfig, ErrInvalidSchedule, err)
			}
			if seen[p.name] {
				return out, fmt.Errorf("%w: %w: periodic name %q listed twice", ErrInvalidConfig, ErrInvalidSchedule, p.name)
			}
			seen[p.name] = true
			ps[i] = p
		}
		out.Periodic = ps
	}
	if out.FetchPollMin < time.Millisecond || out.FetchPollMax < out.FetchPollMin {
		return out, fmt.Errorf("%w: FetchPollMin/FetchPollMax", ErrInvalidConfig)
	}
	if out.MaxFinishBatch == 0 {
		out.MaxFinishBatch = 500
	}
	switch {
	case out.FinishLinger == 0:
		out.FinishLinger = 20 * time.Millisecond
	case out.FinishLinger < 0:
		out.FinishLinger = 0
	case out.FinishLinger > time.Second:
		return out, fmt.Errorf("%w: FinishLinger %v above 1s", ErrInvalidConfig, out.FinishLinger)
	}
	if out.HeartbeatDivisor == 0 {
		out.HeartbeatDivisor = 3
	}
	if out.ReclaimBatch == 0 {
		out.ReclaimBatch = 1000
	}
	switch {
	case out.Slots < 0 || out.Slots > 100000:
		return out, fmt.Errorf("%w: Slots %d outside 0..100000", ErrInvalidConfig, out.Slots)
	case out.MaxClaimBatch < 1 || out.MaxClaimBatch > 1000:
		return out, fmt.Errorf("%w: MaxClaimBatch outside 1..1000", ErrInvalidConfig)
	case out.MaxFinishBatch < 1 || out.MaxFinishBatch > 10000:
		return out, fmt.Errorf("%w: MaxFinishBatch outside 1..10000", ErrInvalidConfig)
	case out.HeartbeatDivisor < 2 || out.HeartbeatDivisor > 20:
		return out, fmt.Errorf("%w: HeartbeatDivisor outside 2..20 (a heartbeat must come well before the lease ends)", ErrInvalidConfig)
	case out.ReclaimBatch < 1 || out.ReclaimEvery < 10*time.Millisecond:
		return out, fmt.Errorf("%w: ReclaimBatch/ReclaimEvery", ErrInvalidConfig)
	case out.RegistryEvery > 0 && out.RegistryEvery < 10*time.Millisecond:
		return out, fmt.Errorf("%w: RegistryEvery below 10ms", ErrInvalidConfig)
	case out.StuckGrace < 0 || out.HardStopGrace < 0:
		return out, fmt.Errorf("%w: StuckGrace/HardStopGrace must be >= 0", ErrInvalidConfig)
	}
	return out, nil
}

func (o *HandlerOptions) withDefaults(kind string) (HandlerOptions, error) {
	var out HandlerOptions
	if o != nil {
		out = *o
	}
	if out.Timeout < 0 {
		return out, fmt.Errorf("%w: kind %q: Timeout must be >= 0", ErrInvalidConfig, kind)
	}
	if out.Timeout == 0 {
		out.Timeout = defaultTimeout
	}
	if out.Retry == nil {
		out.Retry = FullJitter{Base: time.Second, Cap: time.Hour}
	}
	if out.Lease != 0 && (out.Lease < time.Second || out.Lease > 24*time.Hour) {
		return out, fmt.Errorf("%w: kind %q: Lease %v outside 1s..24h", ErrInvalidConfig, kind, out.Lease)
	}
	if out.MaxAttempts < 0 || out.MaxAttempts > 1000 {
		return out, fmt.Errorf("%w: kind %q: MaxAttempts outside 1..1000", ErrInvalidConfig, kind)
	}
	if out.Priority < 0 || out.Priority > maxPriority {
		return out, fmt.Errorf("%w: kind %q: Priority outside 1..9", ErrInvalidConfig, kind)
	}
	if out.Queue != "" && !jobs.ValidQueueName(out.Queue) {
		return out, fmt.Errorf("%w: kind %q: queue name %q", ErrInvalidConfig, kind, out.Queue)
	}
	if out.MaxSnoozes < 0 || out.MaxSnoozes > 1_000_000 {
		return out, fmt.Errorf("%w: kind %q: MaxSnoozes outside 0..1000000", ErrInvalidConfig, kind)
	}
	if out.MaxSnoozes == 0 {
		out.MaxSnoozes = DefaultMaxSnoozes
	}
	return out, nil
}

// engine is the engine's copy of q (validated and defaulted by withDefaults).
func (q QueueConfig) engine() engine.QueueConfig {
	eq := engine.QueueConfig{Concurrency: q.Concurrency, Fairness: q.Fairness.engine(), Claimers: q.Claimers, ClaimAhead: q.ClaimAhead}
	for _, l := range q.Limits {
		eq.Limits = append(eq.Limits, engine.Limit(l))
	}
	return eq
}

// engineConfig is the engine's configuration made of c (withDefaults's result): the public
// types converted once, here, so the engine never sees them.
func (c *Config) engineConfig(sch *dbschema.Schema, check func(ctx context.Context, pool *pgxpool.Pool) error) engine.Config {
	ec := engine.Config{
		ID: c.ID, Registry: c.Registry, Logger: c.Logger, Schema: sch,
		EnginePool: c.EnginePool, AsynchronousCommit: c.AsynchronousCommit, EngineConns: c.EngineConns,
		FetchPollMin: c.FetchPollMin, FetchPollMax: c.FetchPollMax, MaxClaimBatch: c.MaxClaimBatch, Slots: c.Slots,
		MaxFinishBatch: c.MaxFinishBatch, Finishers: c.Finishers, FinishLinger: c.FinishLinger,
		HeartbeatDivisor: c.HeartbeatDivisor, StuckGrace: c.StuckGrace, ReclaimEvery: c.ReclaimEvery,
		ReclaimBatch: c.ReclaimBatch, FinishedRetention: c.FinishedRetention, DeadRetention: c.DeadRetention,
		PruneEvery: c.PruneEvery, RegistryEvery: c.RegistryEvery, ShutdownTimeout: c.ShutdownTimeout,
		EffectKeyPrefix: c.EffectKeyPrefix, HardStopGrace: c.HardStopGrace, FinishRetryMax: c.FinishRetryMax,
		QueueStateEvery: c.QueueStateEvery, CheckDatabase: check,
		Queues: make(map[string]engine.QueueConfig, len(c.Queues)),
	}
	for name, q := range c.Queues {
		ec.Queues[name] = q.engine()
	}
	for i := range c.Periodic {
		ec.Periodic = append(ec.Periodic, c.Periodic[i].engine())
	}
	if on := c.OnOutcome; on != nil {
		ec.OnOutcome = func(o engine.Outcome) {
			on(Outcome{Job: o.Job, Transition: o.Transition, Code: ErrorCode(o.Code), Delay: o.Delay, HandlerErr: o.HandlerErr, Err: o.Err})
		}
	}
	return ec
}

// kindOptions is what the engine reads of a kind's options (withDefaults's result).
func (o *HandlerOptions) kindOptions() engine.KindOptions {
	retry := o.Retry
	return engine.KindOptions{Timeout: o.Timeout, Lease: o.Lease, MaxAttempts: o.MaxAttempts, Queue: o.Queue,
		Priority: o.Priority, MaxSnoozes: o.MaxSnoozes, DeleteOnSuccess: o.DeleteOnSuccess,
		Retry: func(attempt int, code engine.ErrorCode) time.Duration { return retry.Delay(attempt, ErrorCode(code)) }}
}
