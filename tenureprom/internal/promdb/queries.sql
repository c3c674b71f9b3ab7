-- The statements of tenureprom (the cluster collector), its own. sqlc generates package
-- promdb from this file and the core's db/schema.sql (the root sqlc.yaml; make generate, make
-- check-generated). The core's statements (db/queries.sql, db/gen) are not an API: tenureprom
-- uses the core through its public packages, and these statements change with tenureprom.

-- ---------------------------------------------------------------------------------------------
-- Cluster metrics (tenureprom): each reads one partial index's rows, never finished jobs;
-- ClusterReady and ClusterDead read nothing else (index-only scans: the indexes carry kind,
-- priority and last_error_code, migration 0007). docs/operations.md "Scrape cost" has plans.
-- ---------------------------------------------------------------------------------------------

-- name: ClusterReady :many
-- Ready jobs per queue, kind and priority (an index-only scan of jobs_ready_idx): due ones,
-- scheduled ones, and the oldest due job's age in seconds on the database clock.
SELECT queue, kind, priority,
       count(*) FILTER (WHERE run_at <= now())::bigint AS ready,
       count(*) FILTER (WHERE run_at > now())::bigint  AS scheduled,
       coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())), 0)::float8 AS oldest_ready_age_s
FROM tenure.jobs
WHERE state = 'ready'
GROUP BY queue, kind, priority;

-- name: ClusterRunning :many
-- Running jobs per queue, kind and priority (through jobs_running_idx's predicate): all, those
-- whose lease already expired (the sweep has not reclaimed them yet), cancel requests pending,
-- and the age of the oldest running attempt (now - attempted_at).
SELECT queue, kind, priority,
       count(*)::bigint AS running,
       count(*) FILTER (WHERE locked_until < now())::bigint AS lease_expired,
       count(*) FILTER (WHERE cancel_requested_at IS NOT NULL)::bigint AS cancel_requested,
       -- the running attempt claimed longest ago (a hung or slow handler shows here first)
       coalesce(extract(epoch FROM now() - min(attempted_at)), 0)::float8 AS oldest_running_age_s
FROM tenure.jobs
WHERE locked_until IS NOT NULL
GROUP BY queue, kind, priority;

-- name: ClusterDead :many
-- Dead jobs per queue, kind, priority and last error code (an index-only scan of jobs_dead_idx).
SELECT queue, kind, priority, coalesce(last_error_code, 'NONE')::text AS code, count(*)::bigint AS jobs
FROM tenure.jobs
WHERE state = 'dead'
GROUP BY queue, kind, priority, last_error_code;

-- name: ClusterWaiting :many
-- Jobs waiting on dependencies (workflow tasks, sequence jobs; migration 0020) per queue and
-- kind, and the oldest one's age since it was inserted, in seconds on the database clock (an
-- index-only scan of jobs_waiting_idx, migration 0022).
SELECT queue, kind, count(*)::bigint AS waiting,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_waiting_age_s
FROM tenure.jobs
WHERE state = 'waiting'
GROUP BY queue, kind;
