package tenureprom

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenureq/tenure/worker"
)

// StatsSource is what EngineCollector reads: a *worker.Worker.
type StatsSource interface {
	Stats() worker.Stats
}

// EngineCollector exports one worker's engine metrics (see the package documentation). It
// reads a Stats snapshot per scrape; the worker does no work for it in between.
type EngineCollector struct {
	src    StatsSource
	bounds []float64

	counters []engineCounter
	running, lastSuccess,
	completed, attempts, errorsByCode,
	claimDur, finishDur, wait *prometheus.Desc
}

type engineCounter struct {
	desc *prometheus.Desc
	get  func(*worker.Stats) int64
}

// NewEngineCollector returns the collector of w's engine metrics. Register it with
// prometheus.MustRegister (or a registry of your own).
func NewEngineCollector(w StatsSource) *EngineCollector {
	c := &EngineCollector{src: w}
	for _, b := range worker.HistogramBounds() {
		c.bounds = append(c.bounds, b.Seconds())
	}
	counter := func(name, help string, get func(*worker.Stats) int64) {
		c.counters = append(c.counters, engineCounter{prometheus.NewDesc(name, help, nil, nil), get})
	}
	counter("tenure_claims_total", "Claim statements run.", func(s *worker.Stats) int64 { return s.Claims })
	counter("tenure_claims_empty_total", "Claim statements that returned no job.", func(s *worker.Stats) int64 { return s.EmptyClaims })
	counter("tenure_claims_full_total", "Claims that read every priority band from its start instead of from its watermark.", func(s *worker.Stats) int64 { return s.FullClaims })
	counter("tenure_claimed_behind_watermark_total", "Jobs full claims found behind the watermarks (missed by the watermark claims).", func(s *worker.Stats) int64 { return s.ClaimedBehindWatermark })
	counter("tenure_watermark_hints_total", "Band watermarks lowered by a NOTIFY announcing a job committed behind them.", func(s *worker.Stats) int64 { return s.WatermarkHints })
	counter("tenure_claim_errors_total", "Claim statements that failed.", func(s *worker.Stats) int64 { return s.ClaimErrors })
	counter("tenure_jobs_claimed_total", "Jobs claimed.", func(s *worker.Stats) int64 { return s.Claimed })
	counter("tenure_claim_slots_requested_total", "Jobs claims asked for (free slots); jobs_claimed/slots_requested is the fill ratio.", func(s *worker.Stats) int64 { return s.ClaimAsked })
	counter("tenure_stale_writes_total", "Fenced writes (finishes, effect records) that changed nothing: the worker no longer owned the job.", func(s *worker.Stats) int64 { return s.StaleRejected })
	counter("tenure_finish_retries_total", "Finish writes retried after a database error.", func(s *worker.Stats) int64 { return s.FinishRetries })
	counter("tenure_finishes_abandoned_total", "Finishes never written (lease ran out, or Stop's deadline); the sweep retries those jobs.", func(s *worker.Stats) int64 { return s.FinishAbandoned })
	counter("tenure_finish_splits_total", "Finish batches split because the database refused one of their rows.", func(s *worker.Stats) int64 { return s.FinishSplits })
	counter("tenure_heartbeats_total", "Heartbeat statements run.", func(s *worker.Stats) int64 { return s.Heartbeats })
	counter("tenure_heartbeat_errors_total", "Heartbeat statements that failed.", func(s *worker.Stats) int64 { return s.HeartbeatErrors })
	counter("tenure_lease_extensions_total", "Job leases extended by heartbeats.", func(s *worker.Stats) int64 { return s.HeartbeatRows })
	counter("tenure_leases_lost_total", "Jobs whose lease this worker found lost while running them (handler cancelled).", func(s *worker.Stats) int64 { return s.LeasesLost })
	counter("tenure_leases_expired_total", "Expired leases this worker's sweep reclaimed (back to ready, or dead).", func(s *worker.Stats) int64 { return s.Reclaimed })
	counter("tenure_leases_expired_dead_total", "Reclaimed expired leases that had no attempts left (dead).", func(s *worker.Stats) int64 { return s.ReclaimedDead })
	counter("tenure_cancel_signals_total", "Handler contexts cancelled at an operator's request.", func(s *worker.Stats) int64 { return s.CancelSignals })
	counter("tenure_handlers_stuck_total", "Handlers past timeout plus grace whose jobs were left to expire.", func(s *worker.Stats) int64 { return s.Stuck })
	counter("tenure_handler_late_returns_total", "Stuck handlers that eventually returned (their result fenced out as TIMEOUT).", func(s *worker.Stats) int64 { return s.LateFinishes })
	counter("tenure_handler_panics_total", "Handler panics recovered.", func(s *worker.Stats) int64 { return s.Panics })
	counter("tenure_jobs_deferred_total", "Jobs given back because this worker cannot run their payload version yet.", func(s *worker.Stats) int64 { return s.Deferred })
	counter("tenure_jobs_pruned_total", "Final jobs deleted by this worker's retention pruning.", func(s *worker.Stats) int64 { return s.Pruned })
	counter("tenure_listener_reconnects_total", "LISTEN connection reconnects.", func(s *worker.Stats) int64 { return s.ListenerReconnects })
	counter("tenure_stop_released_running_total", "Jobs Stop released while their handlers ignored cancellation.", func(s *worker.Stats) int64 { return s.StillRunning })
	counter("tenure_batches_total", "Batch handler calls started (worker.RegisterBatch).", func(s *worker.Stats) int64 { return s.Batches })
	counter("tenure_batch_jobs_total", "Jobs handed to batch handler calls.", func(s *worker.Stats) int64 { return s.BatchJobs })
	counter("tenure_finished_on_claims_total", "Completions written in the transaction of one of the queue's claims instead of a finish write of their own (succeeded outcomes count them too).", func(s *worker.Stats) int64 { return s.FinishedOnClaims })
	counter("tenure_claimed_ahead_total", "Jobs claimed while no handler slot was free and started when one freed (worker.QueueConfig.ClaimAhead).", func(s *worker.Stats) int64 { return s.ClaimedAhead })
	counter("tenure_claimed_ahead_released_total", "Jobs claimed ahead and given back without running: no slot freed within 1 s, or Stop began.", func(s *worker.Stats) int64 { return s.AheadReleased })
	counter("tenure_awaited_finishes_total", "Finishes written without waiting for FinishLinger because a jobs.Client waited for the job.", func(s *worker.Stats) int64 { return s.AwaitedFinishes })

	c.running = prometheus.NewDesc("tenure_jobs_running", "Jobs this worker owns now (handlers running, claimed ahead and waiting for a slot, or finished but not yet written).", nil, nil)
	c.lastSuccess = prometheus.NewDesc("tenure_last_success_timestamp_seconds", "When this worker last confirmed a succeeded job (Unix time; absent before the first).", nil, nil)
	c.completed = prometheus.NewDesc("tenure_jobs_completed_total", "Attempts finished by this worker, by queue, kind and outcome (succeeded, retried, dead, cancelled, released, stale, abandoned).", []string{"queue", "kind", "outcome"}, nil)
	c.attempts = prometheus.NewDesc("tenure_job_attempts_total", "Attempts finished by this worker, by queue, kind, attempt number (1.."+strconv.Itoa(worker.MaxOutcomeAttempt-1)+", "+strconv.Itoa(worker.MaxOutcomeAttempt)+"+) and outcome.", []string{"queue", "kind", "attempt", "outcome"}, nil)
	c.errorsByCode = prometheus.NewDesc("tenure_job_errors_total", "Failed attempts by error code (HANDLER_ERROR, TIMEOUT, LEASE_EXPIRED, ...).", []string{"code"}, nil)
	c.claimDur = prometheus.NewDesc("tenure_claim_duration_seconds", "Claim statement latency.", nil, nil)
	c.finishDur = prometheus.NewDesc("tenure_finish_duration_seconds", "Batched finish write latency.", nil, nil)
	c.wait = prometheus.NewDesc("tenure_job_wait_seconds", "Queue wait of claimed jobs (due to claimed), by queue and priority.", []string{"queue", "priority"}, nil)
	return c
}

// Describe sends every metric's descriptor.
func (c *EngineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range c.counters {
		ch <- k.desc
	}
	for _, d := range []*prometheus.Desc{c.running, c.lastSuccess, c.completed, c.attempts, c.errorsByCode, c.claimDur, c.finishDur, c.wait} {
		ch <- d
	}
}

// Collect reads one Stats snapshot and sends its metrics.
func (c *EngineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	for _, k := range c.counters {
		ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.get(&s)))
	}
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(s.Running))
	if !s.LastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, float64(s.LastSuccess.UnixNano())/1e9)
	}
	type qko struct{ queue, kind, outcome string }
	totals := map[qko]int64{}
	var order []qko
	for _, o := range s.Outcomes {
		attempt := strconv.Itoa(o.Attempt)
		if o.Attempt >= worker.MaxOutcomeAttempt {
			attempt += "+"
		}
		ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.CounterValue, float64(o.Jobs), o.Queue, o.Kind, attempt, o.Outcome)
		k := qko{o.Queue, o.Kind, o.Outcome}
		if _, ok := totals[k]; !ok {
			order = append(order, k)
		}
		totals[k] += o.Jobs
	}
	for _, k := range order {
		ch <- prometheus.MustNewConstMetric(c.completed, prometheus.CounterValue, float64(totals[k]), k.queue, k.kind, k.outcome)
	}
	for code, n := range s.ErrorCodes {
		ch <- prometheus.MustNewConstMetric(c.errorsByCode, prometheus.CounterValue, float64(n), string(code))
	}
	ch <- c.histogram(c.claimDur, s.ClaimLatency)
	ch <- c.histogram(c.finishDur, s.FinishLatency)
	for _, w := range s.Wait {
		ch <- c.histogram(c.wait, w.Histogram, w.Queue, strconv.Itoa(w.Priority))
	}
}

func (c *EngineCollector) histogram(d *prometheus.Desc, h worker.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(c.bounds))
	for i, b := range c.bounds {
		if i < len(h.Buckets) {
			buckets[b] = h.Buckets[i]
		}
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}
