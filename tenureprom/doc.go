// Package tenureprom exports Tenure's metrics to Prometheus (github.com/prometheus/client_golang).
// The core packages (jobs, worker) do not depend on it.
//
// Two collectors, registered side by side (their metric names never overlap):
//
//   - EngineCollector: one worker process's engine counters, gauges and histograms, read
//     from worker.Worker.Stats at each scrape (claims, outcomes per queue/kind, queue wait,
//     stale writes, leases lost and expired, heartbeats, completions that rode on claims,
//     awaited finishes, batch handler calls). Register it in every worker
//     process; Prometheus' instance label tells the processes apart.
//   - ClusterCollector: the database's view, shared by every process: ready/scheduled/
//     running/dead jobs per queue, kind and priority, the oldest ready job's age, dead jobs by
//     error code, jobs waiting on dependencies (workflow tasks and sequence jobs not released
//     yet: tenure_queue_waiting_jobs and tenure_queue_oldest_waiting_age_seconds per queue and
//     kind), and the worker registry (heartbeat age, last success). Its statements read
//     only the partial indexes' rows (never finished jobs; the ready and dead counts are
//     index-only scans). A scrape serves the latest snapshot of their results and waits for a
//     refresh at most ClusterConfig.Wait, so a large backlog slows the refresh, not the
//     scrape. Register it in one place (a `tenure serve` process, or one worker) rather than
//     in every worker, to scrape once.
//
// The cluster collector reads one Tenure schema, "tenure" unless ClusterConfig.Schema names
// another (docs/guide.md, "A schema of your own"); `tenure serve -schema S` passes S. The
// engine collector needs no schema: it reads its worker, which has one (worker.Config.Schema).
//
// Labels are bounded: priority, outcome, attempt (capped), error code (a bounded vocabulary;
// the cluster collector keeps the MaxDeadCodeSeries largest), queue and kind, and, for the
// registry, the worker id (one series per live worker process, gone once its row is). No job
// id ever becomes a label. Queue and kind names are user strings in the database, so the
// cluster collector keeps at most ClusterConfig.MaxKinds and MaxQueues values of them (the
// ones with the most jobs) and folds the rest into OtherLabel ("other"), summing their
// counts; the engine collector's are the worker's configured queues and registered kinds.
//
// docs/operations.md lists the operator panels with their PromQL, and alerts.yml in this
// directory holds ready-made alert rules.
package tenureprom
