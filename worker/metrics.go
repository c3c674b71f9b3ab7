package worker

import (
	"sort"
	"time"

	"github.com/tenureq/tenure/internal/hist"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// Outcome names in Stats.Outcomes (and in the tenureprom label "outcome").
const (
	OutcomeSucceeded = "succeeded" // finished; the fenced write landed
	OutcomeRetried   = "retried"   // failed, back to ready with a backoff
	OutcomeDead      = "dead"      // failed permanently or out of attempts
	OutcomeCancelled = "cancelled" // cancelled at an operator's request
	OutcomeReleased  = "released"  // given back without charging the attempt (stop, deferral)
	OutcomeSnoozed   = "snoozed"   // the handler snoozed (Snooze): back to ready later, attempt not charged
	OutcomeStale     = "stale"     // the fenced write changed nothing: the job was no longer ours
	OutcomeAbandoned = "abandoned" // never written (lease ran out or Stop's deadline); the sweep retries
)

// MaxOutcomeAttempt caps the attempt number Stats.Outcomes are broken down by: attempt
// MaxOutcomeAttempt counts that attempt and every later one.
const MaxOutcomeAttempt = 5

// Stats is a snapshot of one worker's engine counters since Start.
type Stats struct {
	WorkerID string
	// Claims: statements run, those that returned no row ("nothing claimable right now", not
	// "queue empty"), failed ones, and jobs claimed.
	Claims, EmptyClaims, ClaimErrors, Claimed int64
	// ClaimAsked is the sum of the batch sizes claims asked for (free slots at the time);
	// Claimed/ClaimAsked is the fill ratio.
	ClaimAsked int64
	// FullClaims counts claims that read every priority band from its start instead of from
	// its watermark (see "Watermarks" in claim.go); ClaimedBehindWatermark the jobs they found
	// that the watermark claims had passed (late-committed inserts, backdated RunAt).
	FullClaims, ClaimedBehindWatermark int64
	// WatermarkHints counts band watermarks lowered by a NOTIFY that announced a job committed
	// behind them (an insert transaction that committed after a newer job was claimed).
	WatermarkHints int64
	// LimitedClaims counts claims a limit (QueueConfig.Limits) held back: they claimed less
	// than asked because a group had no room. FlowBlocks counts RetryAfter results that paused
	// their job's limit groups (Limit.RetryAfterPauses). StripedClaims counts limited claims
	// that ran striped (in parallel with others, far from every limit; see limits.go).
	// PermitAllocations counts the times this worker (re)sized its shares of a concurrency limit
	// (permits.go).
	LimitedClaims, FlowBlocks, StripedClaims, PermitAllocations int64
	// Outcomes confirmed by a fenced write.
	Succeeded, Retried, Dead, Cancelled, Released int64
	// Snoozed counts attempts that ended with a snooze (Snooze) that landed.
	Snoozed int64
	// StaleRejected counts fenced finishes that changed 0 rows: the worker had lost the job.
	StaleRejected int64
	// FinishRetries counts finish writes retried after a database error; FinishAbandoned the
	// finishes given up because the lease ran out while the database was unreachable.
	FinishRetries, FinishAbandoned int64
	// Heartbeats: statements, job leases extended, failures, leases found lost.
	Heartbeats, HeartbeatRows, HeartbeatErrors, LeasesLost int64
	// CancelSignals: handler contexts cancelled by an operator's request.
	CancelSignals int64
	// Stuck: handlers past timeout+grace whose jobs were left to expire; LateFinishes: their
	// eventual returns (fenced out as TIMEOUT).
	Stuck, LateFinishes, Panics int64
	// Reclaimed: expired leases this worker's sweep returned to ready; ReclaimedDead: those
	// that had no attempts left.
	Reclaimed, ReclaimedDead, Pruned int64
	ListenerReconnects               int64
	// Deferred: jobs given back without charging the attempt because this worker cannot run
	// their payload yet (a newer payload version during a rolling deploy).
	Deferred int64
	// FinishSplits: finish batches split because the database refused one of their rows.
	FinishSplits int64
	// FinishBusy: finishes a batched finish skipped because another session held the job's
	// row locked; each was then written alone once the lock went.
	FinishBusy int64
	// FinishedOnClaims: completions that landed in the transaction of one of the queue's claims
	// instead of a finish write of their own (Succeeded counts them too; docs/design.md,
	// "Completions ride on claims").
	FinishedOnClaims int64
	// ClaimedAhead: jobs claimed while no slot was free and started when one freed
	// (QueueConfig.ClaimAhead); AheadReleased: such jobs given back because no slot freed
	// within 1 s, or because Stop began before one did.
	ClaimedAhead, AheadReleased int64
	// AwaitedFinishes: finishes written without waiting for FinishLinger because a
	// jobs.Client waits for the job (Client.Wait announced it on the await channel).
	AwaitedFinishes int64
	// StalePlanRetries: engine statements re-run at once after PostgreSQL refused a cached
	// statement whose result type a schema change altered (SQLSTATE 0A000).
	StalePlanRetries int64
	// StillRunning: jobs Stop released while their handlers ignored cancellation.
	StillRunning int64
	// Batches counts batch handler calls started (RegisterBatch), BatchJobs the jobs they
	// held; BatchJobs/Batches is the mean batch size.
	Batches, BatchJobs int64
	// Running is the number of jobs this worker owns now (handlers running, jobs claimed ahead
	// waiting for a slot, and jobs whose handler returned but whose finish has not been written
	// yet).
	Running int
	// ClaimP50/P99: claim statement latency. FinishP50/P99: batched finish write latency.
	ClaimP50, ClaimP99, FinishP50, FinishP99 time.Duration
	// Wait: queue wait (due -> claimed) per queue and priority, as measured at claim.
	Wait []WaitStats
	// ErrorCodes counts failures by code.
	ErrorCodes map[ErrorCode]int64
	// LastSuccess is when this worker last confirmed a succeeded job (zero if never).
	LastSuccess time.Time
	// ReclaimErrors, PruneErrors and RegistryErrors count failed lease-expiry sweeps, pruning
	// passes and worker registry heartbeats.
	ReclaimErrors, PruneErrors, RegistryErrors int64
	// PermissionErrors counts the engine's own statements (claim, heartbeat, reclaim, prune,
	// registry, ...) refused with insufficient_privilege (SQLSTATE 42501): the role lacks a grant
	// (tenure.grant_worker). Each is also counted by its source's counter and logged at ERROR.
	PermissionErrors int64
	// LastError is the most recent failure of one of the engine's own statements (claim,
	// heartbeat, reclaim sweep, prune, finish write, registry heartbeat), prefixed with which
	// one, and LastErrorAt when it
	// happened (zero if never). Repeated failures are logged at most every 10 seconds per
	// kind; these and the error counters show every one.
	LastError   string
	LastErrorAt time.Time
	// PausedQueues lists this worker's queues that an operator paused (jobs.Client.PauseQueue),
	// as the worker last saw them: it claims from none of them.
	PausedQueues []string
	// PeriodicEnqueued counts the periodic jobs this worker enqueued (ticks it won, and
	// run-on-start jobs); PeriodicSkipped the ticks it dropped under CatchUpSkip;
	// PeriodicErrors failed attempts to read or enqueue its schedules (retried).
	PeriodicEnqueued, PeriodicSkipped, PeriodicErrors int64
	// Outcomes break the attempts this worker finished down by queue, kind, outcome
	// (Outcome* constants) and attempt number (capped at MaxOutcomeAttempt), sorted.
	Outcomes []OutcomeCount
	// ClaimLatency and FinishLatency are the claim and batched finish statement latencies
	// as cumulative histograms over HistogramBounds.
	ClaimLatency, FinishLatency Histogram
}

// OutcomeCount is the number of attempts of one queue and kind, at one attempt number, that
// ended with one outcome.
type OutcomeCount struct {
	Queue, Kind, Outcome string
	// Attempt is the attempt number, 1-based; MaxOutcomeAttempt means "that one or later".
	Attempt int
	Jobs    int64
}

// Histogram is a snapshot of a latency histogram in cumulative (Prometheus) form: Buckets[i]
// counts the observations at most HistogramBounds()[i]. Bucket counts are accurate to one
// internal bucket (about 12%, erring slow).
type Histogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets []uint64
}

var histogramBounds = []time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
	30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour,
}

// HistogramBounds returns the upper bounds of Histogram.Buckets, ascending (1 ms to 1 h).
func HistogramBounds() []time.Duration { return append([]time.Duration(nil), histogramBounds...) }

func snapshot(h *hist.H) Histogram {
	b, n, sum := h.Cumulative(histogramBounds)
	return Histogram{Count: n, Sum: sum, Buckets: b}
}

// WaitStats are the queue-wait percentiles of one queue and priority.
type WaitStats struct {
	Queue              string
	Priority           int
	Count              uint64
	P50, P95, P99, Max time.Duration
	// Histogram is the same distribution in cumulative form (see Histogram).
	Histogram Histogram
}

// Stats returns a snapshot of the engine's counters.
func (w *Worker) Stats() Stats {
	m := w.e.Metrics()
	s := Stats{
		WorkerID: w.cfg.ID,
		Claims:   m.Claims.Load(), EmptyClaims: m.EmptyClaims.Load(), ClaimErrors: m.ClaimErrors.Load(), Claimed: m.Claimed.Load(), ClaimAsked: m.ClaimAsked.Load(),
		FullClaims: m.FullClaims.Load(), ClaimedBehindWatermark: m.ClaimedBehindWatermark.Load(),
		WatermarkHints: m.WatermarkHints.Load(),
		LimitedClaims:  m.LimitedClaims.Load(), FlowBlocks: m.FlowBlocks.Load(), StripedClaims: m.StripedClaims.Load(),
		PermitAllocations: m.PermitAllocations.Load(),
		Succeeded:         m.Succeeded.Load(), Retried: m.Retried.Load(), Dead: m.Dead.Load(), Cancelled: m.Cancelled.Load(), Released: m.Released.Load(), Snoozed: m.Snoozed.Load(),
		StaleRejected: m.StaleRejected.Load(), FinishRetries: m.FinishRetries.Load(), FinishAbandoned: m.FinishAbandoned.Load(),
		Heartbeats: m.Heartbeats.Load(), HeartbeatRows: m.HeartbeatRows.Load(), HeartbeatErrors: m.HeartbeatErrors.Load(), LeasesLost: m.LeasesLost.Load(),
		CancelSignals: m.CancelSignals.Load(), Stuck: m.Stuck.Load(), LateFinishes: m.LateFinishes.Load(), Panics: m.Panics.Load(),
		Reclaimed: m.Reclaimed.Load(), ReclaimedDead: m.ReclaimedDead.Load(), Pruned: m.Pruned.Load(),
		ListenerReconnects: m.ListenerReconnects.Load(), Running: int(m.Owned.Load()),
		Deferred: m.Deferred.Load(), FinishSplits: m.FinishSplits.Load(), StillRunning: m.StillRunning.Load(),
		FinishBusy: m.FinishBusy.Load(), FinishedOnClaims: m.FinishedOnClaims.Load(), ClaimedAhead: m.ClaimedAhead.Load(), AheadReleased: m.AheadReleased.Load(), StalePlanRetries: m.StalePlanRetries.Load(),
		AwaitedFinishes: m.AwaitedFinishes.Load(), Batches: m.Batches.Load(), BatchJobs: m.BatchJobs.Load(),
		ClaimP50: m.ClaimLatency.Quantile(0.5), ClaimP99: m.ClaimLatency.Quantile(0.99),
		FinishP50: m.FinishLatency.Quantile(0.5), FinishP99: m.FinishLatency.Quantile(0.99),
		ErrorCodes: map[ErrorCode]int64{},
	}
	s.ReclaimErrors, s.PruneErrors, s.RegistryErrors = m.ReclaimErrors.Load(), m.PruneErrors.Load(), m.RegistryErrors.Load()
	s.PermissionErrors = m.PermissionErrors.Load()
	s.PeriodicEnqueued, s.PeriodicSkipped, s.PeriodicErrors = m.PeriodicEnqueued.Load(), m.PeriodicSkipped.Load(), m.PeriodicErrors.Load()
	s.PausedQueues = w.e.PausedQueues()
	sort.Strings(s.PausedQueues)
	if ns := m.LastSuccess.Load(); ns != 0 {
		s.LastSuccess = time.Unix(0, ns)
	}
	m.Keyed(func(k *engine.Keyed) {
		for _, wh := range k.Wait {
			h := wh.H
			s.Wait = append(s.Wait, WaitStats{Queue: wh.Queue, Priority: wh.Priority, Count: h.Count(),
				P50: h.Quantile(0.5), P95: h.Quantile(0.95), P99: h.Quantile(0.99), Max: h.Max(), Histogram: snapshot(h)})
		}
		for c, n := range k.Codes {
			s.ErrorCodes[ErrorCode(c)] = n
		}
		for _, o := range k.Outcomes {
			s.Outcomes = append(s.Outcomes, OutcomeCount{Queue: o.Queue, Kind: o.Kind, Outcome: o.Outcome, Attempt: o.Attempt, Jobs: o.Jobs})
		}
		s.LastError, s.LastErrorAt = k.LastError, k.LastErrorAt
	})
	s.ClaimLatency, s.FinishLatency = snapshot(&m.ClaimLatency), snapshot(&m.FinishLatency)
	sort.Slice(s.Outcomes, func(i, j int) bool {
		a, b := s.Outcomes[i], s.Outcomes[j]
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Outcome != b.Outcome {
			return a.Outcome < b.Outcome
		}
		return a.Attempt < b.Attempt
	})
	sort.Slice(s.Wait, func(i, j int) bool {
		if s.Wait[i].Queue != s.Wait[j].Queue {
			return s.Wait[i].Queue < s.Wait[j].Queue
		}
		return s.Wait[i].Priority > s.Wait[j].Priority
	})
	return s
}
