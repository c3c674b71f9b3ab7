package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenureq/tenure/internal/hist"
)

// Metrics are the engine's in-process counters and histograms (bounded memory). The engine
// writes them; package worker reads them into its Stats (worker.Worker.Stats), the only
// reader besides tests.
type Metrics struct {
	Claims, EmptyClaims, ClaimErrors, Claimed, ClaimAsked  atomic.Int64
	FullClaims, ClaimedBehindWatermark, WatermarkHints     atomic.Int64
	LimitedClaims, FlowBlocks, StripedClaims               atomic.Int64
	PermitAllocations                                      atomic.Int64
	ClaimBatches, ClaimBatchRequests                       atomic.Int64 // claimbatch.go
	Succeeded, Retried, Dead, Cancelled, Released, Snoozed atomic.Int64
	StaleRejected, FinishRetries, FinishAbandoned          atomic.Int64
	Heartbeats, HeartbeatRows, HeartbeatErrors, LeasesLost atomic.Int64
	CancelSignals, Stuck, LateFinishes, Panics             atomic.Int64
	Reclaimed, ReclaimedDead, Pruned, ListenerReconnects   atomic.Int64
	Deferred, FinishSplits, StillRunning                   atomic.Int64
	FinishBusy, StalePlanRetries, AwaitedFinishes          atomic.Int64
	FinishedOnClaims                                       atomic.Int64
	ClaimedAhead, AheadReleased                            atomic.Int64 // ahead.go
	RegistryWrites                                         atomic.Int64
	Batches, BatchJobs                                     atomic.Int64 // batch.go
	ReclaimErrors, PruneErrors, RegistryErrors             atomic.Int64
	PermissionErrors                                       atomic.Int64
	PeriodicEnqueued, PeriodicSkipped, PeriodicErrors      atomic.Int64
	Owned, HandlersRunning                                 atomic.Int64 // gauges
	ClaimLatency, FinishLatency                            hist.H
	LastSuccess                                            atomic.Int64 // unix nanos

	mu          sync.Mutex
	wait        map[waitKey]*hist.H
	codes       map[ErrorCode]int64
	outcomes    map[outcomeKey]int64
	lastError   string    // under mu
	lastErrorAt time.Time // under mu
}

type waitKey struct {
	queue    string
	priority int
}

func newMetrics() *Metrics {
	return &Metrics{wait: map[waitKey]*hist.H{}, codes: map[ErrorCode]int64{}, outcomes: map[outcomeKey]int64{}}
}

// outcomeKey is bounded: queues are configured, kinds registered (claims take no other
// kind), outcomes a fixed set, attempts capped at MaxOutcomeAttempt.
type outcomeKey struct {
	queue, kind, outcome string
	attempt              int
}

// Outcome names (worker.Stats.Outcomes, the tenureprom label "outcome", Outcome.Transition):
// package worker exports the same names (worker.OutcomeSucceeded, ...; a test checks they are
// equal).
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

// MaxOutcomeAttempt caps the attempt number outcomes are broken down by (worker.MaxOutcomeAttempt).
const MaxOutcomeAttempt = 5

func (m *Metrics) recordOutcome(queue, kind, outcome string, attempt int) {
	k := outcomeKey{queue: queue, kind: kind, outcome: outcome, attempt: min(max(attempt, 1), MaxOutcomeAttempt)}
	m.mu.Lock()
	m.outcomes[k]++
	m.mu.Unlock()
}

func (m *Metrics) recordWait(queue string, priority int, d time.Duration) {
	k := waitKey{queue, priority}
	m.mu.Lock()
	h := m.wait[k]
	if h == nil {
		h = &hist.H{}
		m.wait[k] = h
	}
	m.mu.Unlock()
	h.Record(d)
}

func (m *Metrics) recordCode(c ErrorCode) {
	m.mu.Lock()
	m.codes[c]++
	m.mu.Unlock()
}

// WaitHist is the queue-wait histogram of one queue and priority.
type WaitHist struct {
	Queue    string
	Priority int
	H        *hist.H
}

// OutcomeN is the number of attempts of one queue, kind, outcome and attempt number.
type OutcomeN struct {
	Queue, Kind, Outcome string
	Attempt              int
	Jobs                 int64
}

// Keyed is a snapshot of the keyed metrics (taken under their lock): the queue-wait
// histograms, the failures by code, the outcomes, and the engine's last error.
type Keyed struct {
	Wait        []WaitHist
	Codes       map[ErrorCode]int64
	Outcomes    []OutcomeN
	LastError   string
	LastErrorAt time.Time
}

// Keyed returns the keyed metrics, in no particular order. Each WaitHist's quantiles are read
// under the lock too, as before the split (the histogram pointers stay live).
func (m *Metrics) Keyed(each func(k *Keyed)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := &Keyed{Codes: make(map[ErrorCode]int64, len(m.codes)), LastError: m.lastError, LastErrorAt: m.lastErrorAt}
	for wk, h := range m.wait {
		k.Wait = append(k.Wait, WaitHist{Queue: wk.queue, Priority: wk.priority, H: h})
	}
	for c, n := range m.codes {
		k.Codes[c] = n
	}
	for ok, n := range m.outcomes {
		k.Outcomes = append(k.Outcomes, OutcomeN{Queue: ok.queue, Kind: ok.kind, Outcome: ok.outcome, Attempt: ok.attempt, Jobs: n})
	}
	each(k)
}
