-- The statements of tenureui (the dashboard), its own. sqlc generates package
-- uidb from this file and the core's db/schema.sql (the root sqlc.yaml; make generate, make
-- check-generated). The core's statements (db/queries.sql, db/gen) are not an API: tenureui
-- uses the core through its public packages, and these statements change with tenureui.

-- ---------------------------------------------------------------------------------------------
-- Dashboard (package tenureui). Each statement reads one index and a bounded set of rows, never
-- the whole table: ready, running and dead jobs through their partial indexes (the live
-- backlog, not the finished rows); any state through an id window [@floor_id, @before_id) of
-- the primary key, whose width the dashboard bounds (finished jobs are found window by window).
-- The ready, running and dead lists sort by "id + 0": ordered by id itself, the planner may
-- walk the primary key backwards from the newest row, which reads every newer finished row
-- first; ordered by an expression, it reads the state's partial index and sorts the backlog.
-- ---------------------------------------------------------------------------------------------

-- name: UIJobIDBounds :one
-- The smallest and largest job ids (two primary-key probes), where the id windows start and end.
SELECT coalesce(min(id), 0)::bigint AS min_id, coalesce(max(id), 0)::bigint AS max_id FROM tenure.jobs;

-- name: UIListWindow :many
-- Jobs of any state in the id window [@floor_id, @before_id), newest first, filtered. The
-- primary key bounds the rows read to the window's width, whatever the filters match.
-- @search is a case-insensitive substring of the first search_chars characters of the args'
-- JSON text, looked for only in args stored in at most search_max_stored bytes; @tag one of
-- the job's tags. A row carries a preview of its args (the first preview_chars characters of
-- their JSON text; '' when they are stored in over preview_max_stored bytes), never the
-- whole args: a list page's cost does not grow with the args' size (issue 29).
SELECT id, state, queue, kind, priority, attempts, max_attempts, generation, last_error_code, run_at, created_at,
       cancel_requested_at,
       (CASE WHEN pg_column_size(payload) <= sqlc.arg(preview_max_stored)::int THEN left(payload::text, sqlc.arg(preview_chars)::int)
             ELSE '' END)::text AS args_preview,
       pg_column_size(payload)::int AS args_stored
FROM tenure.jobs
WHERE id < @before_id AND id >= @floor_id
  AND (sqlc.narg(state)::tenure.job_state IS NULL OR state = sqlc.narg(state)::tenure.job_state)
  AND (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
  AND (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(priority)::smallint IS NULL OR priority = sqlc.narg(priority)::smallint)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR created_at < sqlc.narg(created_to)::timestamptz)
  AND (sqlc.narg(search)::text IS NULL OR CASE WHEN pg_column_size(payload) <= sqlc.arg(search_max_stored)::int
       THEN strpos(lower(left(payload::text, sqlc.arg(search_chars)::int)), lower(sqlc.narg(search)::text)) > 0 ELSE false END)
  AND (sqlc.narg(tag)::text IS NULL OR tags @> ARRAY[sqlc.narg(tag)::text])
ORDER BY id DESC
LIMIT @max_rows;

-- name: UIListReady :many
-- Ready jobs below @before_id, newest first, filtered: reads jobs_ready_idx (the ready backlog).
SELECT id, state, queue, kind, priority, attempts, max_attempts, generation, last_error_code, run_at, created_at,
       cancel_requested_at,
       (CASE WHEN pg_column_size(payload) <= sqlc.arg(preview_max_stored)::int THEN left(payload::text, sqlc.arg(preview_chars)::int)
             ELSE '' END)::text AS args_preview,
       pg_column_size(payload)::int AS args_stored
FROM tenure.jobs
WHERE state = 'ready' AND id < @before_id
  AND (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
  AND (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(priority)::smallint IS NULL OR priority = sqlc.narg(priority)::smallint)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR created_at < sqlc.narg(created_to)::timestamptz)
  AND (sqlc.narg(search)::text IS NULL OR CASE WHEN pg_column_size(payload) <= sqlc.arg(search_max_stored)::int
       THEN strpos(lower(left(payload::text, sqlc.arg(search_chars)::int)), lower(sqlc.narg(search)::text)) > 0 ELSE false END)
  AND (sqlc.narg(tag)::text IS NULL OR tags @> ARRAY[sqlc.narg(tag)::text])
ORDER BY id + 0 DESC -- not the primary key's order: see the section comment
LIMIT @max_rows;

-- name: UIListRunning :many
-- Running jobs below @before_id, newest first, filtered: reads jobs_running_idx (leased rows).
SELECT id, state, queue, kind, priority, attempts, max_attempts, generation, last_error_code, run_at, created_at,
       cancel_requested_at,
       (CASE WHEN pg_column_size(payload) <= sqlc.arg(preview_max_stored)::int THEN left(payload::text, sqlc.arg(preview_chars)::int)
             ELSE '' END)::text AS args_preview,
       pg_column_size(payload)::int AS args_stored
FROM tenure.jobs
WHERE locked_until IS NOT NULL AND state = 'running' AND id < @before_id
  AND (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
  AND (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(priority)::smallint IS NULL OR priority = sqlc.narg(priority)::smallint)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR created_at < sqlc.narg(created_to)::timestamptz)
  AND (sqlc.narg(search)::text IS NULL OR CASE WHEN pg_column_size(payload) <= sqlc.arg(search_max_stored)::int
       THEN strpos(lower(left(payload::text, sqlc.arg(search_chars)::int)), lower(sqlc.narg(search)::text)) > 0 ELSE false END)
  AND (sqlc.narg(tag)::text IS NULL OR tags @> ARRAY[sqlc.narg(tag)::text])
ORDER BY id + 0 DESC -- not the primary key's order: see the section comment
LIMIT @max_rows;

-- name: UIListDead :many
-- Dead jobs below @before_id, newest first, filtered: reads jobs_dead_idx (the dead set).
SELECT id, state, queue, kind, priority, attempts, max_attempts, generation, last_error_code, run_at, created_at,
       cancel_requested_at,
       (CASE WHEN pg_column_size(payload) <= sqlc.arg(preview_max_stored)::int THEN left(payload::text, sqlc.arg(preview_chars)::int)
             ELSE '' END)::text AS args_preview,
       pg_column_size(payload)::int AS args_stored
FROM tenure.jobs
WHERE state = 'dead' AND id < @before_id
  AND (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
  AND (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(priority)::smallint IS NULL OR priority = sqlc.narg(priority)::smallint)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR created_at < sqlc.narg(created_to)::timestamptz)
  AND (sqlc.narg(search)::text IS NULL OR CASE WHEN pg_column_size(payload) <= sqlc.arg(search_max_stored)::int
       THEN strpos(lower(left(payload::text, sqlc.arg(search_chars)::int)), lower(sqlc.narg(search)::text)) > 0 ELSE false END)
  AND (sqlc.narg(tag)::text IS NULL OR tags @> ARRAY[sqlc.narg(tag)::text])
ORDER BY id + 0 DESC -- not the primary key's order: see the section comment
LIMIT @max_rows;

-- name: UIReadyBands :many
-- Per queue and priority, through jobs_ready_idx: due, scheduled and retrying (ready after a
-- failed attempt) jobs, and the oldest due job's age in seconds on the database clock.
SELECT queue, priority,
       count(*) FILTER (WHERE run_at <= now())::bigint AS ready,
       count(*) FILTER (WHERE run_at > now())::bigint  AS scheduled,
       count(*) FILTER (WHERE attempts > 0)::bigint    AS retrying,
       coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())), 0)::float8 AS oldest_ready_age_s
FROM tenure.jobs
WHERE state = 'ready'
GROUP BY queue, priority;

-- name: UICompletions :many
-- Jobs finished per minute since @since (through jobs_finished_idx), oldest minute first.
SELECT extract(epoch FROM date_trunc('minute', finished_at))::bigint AS minute,
       count(*)::bigint AS finished,
       count(*) FILTER (WHERE state = 'succeeded')::bigint AS succeeded
FROM tenure.jobs
WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at >= @since::timestamptz
GROUP BY 1
ORDER BY 1;

-- name: UIStatementTimeout :exec
-- Bounds each later statement of the dashboard's read transaction (Config.QueryTimeout).
SELECT set_config('statement_timeout', sqlc.arg(timeout_ms)::bigint::text, true);

-- name: UIJobEffects :many
-- A job's effect-ledger rows (through effects_job_name), by name: key and name cut to
-- text_chars characters, the result to the first value_chars + 1 characters of its JSON text.
SELECT left(key, sqlc.arg(text_chars)::int)::text AS key, left(name, sqlc.arg(text_chars)::int)::text AS name, generation,
       left(result::text, sqlc.arg(value_chars)::int + 1)::text AS result_head, created_at, updated_at
FROM tenure.effects WHERE job_id = @job_id ORDER BY name LIMIT @max_rows;

-- name: UIJob :one
-- One job for the dashboard's job page (through the primary key), every value bounded: the
-- args, output, error history and metadata as the first value_chars + 1 characters of their
-- JSON text (one more than the page shows tells it the value was cut), with their stored sizes.
SELECT id, queue, kind, payload_version, state, priority, run_at, attempts, max_attempts, lease_ms,
       left(coalesce(locked_by, ''), sqlc.arg(text_chars)::int)::text AS locked_by, locked_until, claim_token, generation,
       attempted_at, last_error_code, created_at, updated_at, finished_at, cancel_requested_at, tags, snoozes,
       left(payload::text, sqlc.arg(value_chars)::int + 1)::text AS args_head, pg_column_size(payload)::int AS args_stored,
       coalesce(left(output::text, sqlc.arg(value_chars)::int + 1), '')::text AS output_head,
       coalesce(pg_column_size(output), 0)::int AS output_stored,
       left(errors::text, sqlc.arg(value_chars)::int + 1)::text AS errors_head, pg_column_size(errors)::int AS errors_stored,
       left(metadata::text, sqlc.arg(value_chars)::int + 1)::text AS metadata_head, pg_column_size(metadata)::int AS metadata_stored,
       -- the attempt's progress (worker.Progress; bounded like the other values) and the
       -- handler timeout its worker declared for the kind (tenure.kinds; 0 when unknown)
       coalesce(left(progress::text, sqlc.arg(value_chars)::int + 1), '')::text AS progress_head,
       coalesce((SELECT coalesce(max(k.timeout_ms) FILTER (WHERE k.worker_id = j.locked_by), max(k.timeout_ms))
                 FROM tenure.kinds k WHERE k.kind = j.kind), 0)::bigint AS timeout_ms
FROM tenure.jobs j WHERE id = @id;

-- name: UIJobAudit :many
-- A job's audit entries (through audit_job_idx), oldest first: actor and reason cut to
-- text_chars characters, the detail to the first value_chars + 1 characters of its JSON text.
SELECT id, at, left(actor, sqlc.arg(text_chars)::int)::text AS actor, action, left(reason, sqlc.arg(text_chars)::int)::text AS reason,
       left(detail::text, sqlc.arg(value_chars)::int + 1)::text AS detail_head
FROM tenure.audit WHERE job_id = @job_id ORDER BY id LIMIT @max_rows;

-- name: UIJobRaw :one
-- One stored JSON value of a job ('args', 'output', 'errors' or 'metadata') for the
-- dashboard's raw download: its text as UTF-8, at most max_bytes + 1 bytes of it (the
-- dashboard refuses a value over max_bytes rather than cut it); NULL when the job has none.
SELECT substring(convert_to(CASE sqlc.arg(field)::text WHEN 'args' THEN payload::text WHEN 'output' THEN output::text
                                              WHEN 'errors' THEN errors::text WHEN 'metadata' THEN metadata::text END,
                            'UTF8') FROM 1 FOR sqlc.arg(max_bytes)::int + 1)::bytea AS value
FROM tenure.jobs WHERE id = @id;

-- ---------------------------------------------------------------------------------------------
-- The dashboard's overview: the running and dead counts of tenureprom's cluster metrics (each
-- reads one partial index), the queue waits of jobs.Client.Stats, the database clock.
-- ---------------------------------------------------------------------------------------------

-- name: ClusterRunning :many
-- Running jobs per queue, kind and priority (through jobs_running_idx's predicate): all, those
-- whose lease already expired (the sweep has not reclaimed them yet), cancel requests pending.
SELECT queue, kind, priority,
       count(*)::bigint AS running,
       count(*) FILTER (WHERE locked_until < now())::bigint AS lease_expired,
       count(*) FILTER (WHERE cancel_requested_at IS NOT NULL)::bigint AS cancel_requested
FROM tenure.jobs
WHERE locked_until IS NOT NULL
GROUP BY queue, kind, priority;

-- name: ClusterDead :many
-- Dead jobs per queue, kind, priority and last error code (an index-only scan of jobs_dead_idx).
SELECT queue, kind, priority, coalesce(last_error_code, 'NONE')::text AS code, count(*)::bigint AS jobs
FROM tenure.jobs
WHERE state = 'dead'
GROUP BY queue, kind, priority, last_error_code;

-- name: WaitStats :many
-- Queue wait (run_at -> claim) percentiles of jobs finished in the last window_us microseconds, per queue and priority.
SELECT queue, priority,
       count(*)::bigint AS finished,
       count(*) FILTER (WHERE state = 'succeeded')::bigint AS succeeded,
       coalesce(percentile_cont(0.5)  WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)), 0)::float8 AS wait_p50_s,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)), 0)::float8 AS wait_p95_s,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)), 0)::float8 AS wait_p99_s
FROM tenure.jobs
WHERE state IN ('succeeded', 'dead', 'cancelled') AND attempted_at IS NOT NULL
  AND finished_at >= now() - sqlc.arg(window_us)::bigint * interval '1 microsecond'
GROUP BY queue, priority
ORDER BY queue, priority DESC;

-- name: DatabaseNow :one
SELECT now()::timestamptz AS now;

-- ---------------------------------------------------------------------------------------------
-- Workflows and sequences (issue 30; migration 0020): the job page's links, the workflow view
-- (tasks by depth, what waits on what) and the sequence view.
-- ---------------------------------------------------------------------------------------------

-- name: UIJobFlow :one
-- The workflow and sequence a job is in (through the primary key), and its unresolved
-- dependencies. Task names and sequence keys are at most 200 characters (their domains).
SELECT workflow_id, coalesce(task_name, '')::text AS task_name, coalesce(sequence_key, '')::text AS sequence_key, coalesce(deps_pending, 0)::int AS deps_pending
FROM tenure.jobs WHERE id = @id;

-- name: UIWorkflowTasks :many
-- A workflow's first max_rows tasks in id order (insertion order: dependencies first), through
-- jobs_workflow_idx; kinds, queues and the workflow's name cut to text_chars characters.
SELECT id, coalesce(task_name, '')::text AS task_name,
       left(kind, sqlc.arg(text_chars)::int)::text AS kind, left(queue, sqlc.arg(text_chars)::int)::text AS queue,
       state, attempts, max_attempts, coalesce(deps_pending, 0)::int AS deps_pending, attempted_at, finished_at, last_error_code,
       left(coalesce(metadata->>'tenure.workflow', ''), sqlc.arg(text_chars)::int)::text AS workflow_name
FROM tenure.jobs
WHERE workflow_id = @workflow_id::uuid
ORDER BY id
LIMIT @max_rows;

-- name: UIWorkflowStates :many
-- A workflow's tasks per state, all of them (through jobs_workflow_idx).
SELECT state, count(*)::bigint AS jobs
FROM tenure.jobs
WHERE workflow_id = @workflow_id::uuid
GROUP BY state;

-- name: UIWorkflowEdges :many
-- The dependencies of the given tasks (through job_deps_job_idx), at most max_rows.
SELECT dep_id, job_id, resolved, on_failure
FROM tenure.job_deps
WHERE job_id = ANY (@job_ids::bigint[])
ORDER BY job_id, dep_id
LIMIT @max_rows;

-- name: UISequenceJobs :many
-- A sequence's jobs not succeeded (a dead or cancelled one that holds its sequence is among
-- them), the first max_rows in order, through jobs_sequence_idx: the first runs, is next or
-- holds the sequence; the others wait, each on the one before.
SELECT id, left(kind, sqlc.arg(text_chars)::int)::text AS kind, state, attempts, max_attempts, run_at, attempted_at,
       last_error_code, created_at
FROM tenure.jobs
WHERE sequence_key = @key::text AND state <> 'succeeded'
ORDER BY id
LIMIT @max_rows;

-- name: UISequenceStates :many
-- A sequence's jobs per state (through jobs_sequence_idx).
SELECT state, count(*)::bigint AS jobs
FROM tenure.jobs
WHERE sequence_key = @key::text
GROUP BY state;
