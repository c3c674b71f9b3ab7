-- Tenure schema: the full current schema, the one sqlc reads.
-- Migrations in db/migrations/ must produce exactly this (a test compares the catalogs).
-- Every object lives in the dedicated schema "tenure" so it never collides with the app's tables.

CREATE SCHEMA IF NOT EXISTS tenure;

-- Job lifecycle. cancel-requested is not a state: it is running + cancel_requested_at,
-- so every fenced transition keeps the single condition state = 'running'.
CREATE TYPE tenure.job_state AS ENUM ('ready', 'running', 'succeeded', 'dead', 'cancelled');

CREATE TABLE tenure.jobs (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue               text             NOT NULL DEFAULT 'default',
    kind                text             NOT NULL,
    payload             jsonb            NOT NULL,
    payload_version     integer          NOT NULL DEFAULT 1,
    state               tenure.job_state NOT NULL DEFAULT 'ready',
    priority            smallint         NOT NULL DEFAULT 2,
    run_at              timestamptz      NOT NULL DEFAULT now(),
    attempts            integer          NOT NULL DEFAULT 0,
    max_attempts        integer          NOT NULL DEFAULT 25,
    lease_ms            integer          NOT NULL DEFAULT 30000,
    locked_by           text,
    locked_until        timestamptz,
    claim_token         uuid,
    generation          bigint           NOT NULL DEFAULT 0,
    attempted_at        timestamptz,
    last_error_code     text,
    errors              jsonb            NOT NULL DEFAULT '[]',
    created_at          timestamptz      NOT NULL DEFAULT now(),
    updated_at          timestamptz      NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    cancel_requested_at timestamptz,
    -- string key/value pairs from the enqueuer for the handler (trace context, request ids)
    metadata            jsonb            NOT NULL DEFAULT '{}',
    -- claimed by a limited claim as a kind a concurrency limit covers (migration 0010): only
    -- such running rows enter jobs_limited_idx
    limited             boolean          NOT NULL DEFAULT false,

    CONSTRAINT jobs_queue_len      CHECK (char_length(queue) BETWEEN 1 AND 128),
    CONSTRAINT jobs_kind_len       CHECK (char_length(kind) BETWEEN 1 AND 128),
    CONSTRAINT jobs_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT jobs_version_pos    CHECK (payload_version >= 1),
    CONSTRAINT jobs_priority_range CHECK (priority BETWEEN 1 AND 9),
    CONSTRAINT jobs_attempts_range CHECK (attempts >= 0 AND attempts <= max_attempts),
    CONSTRAINT jobs_max_attempts   CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT jobs_lease_range    CHECK (lease_ms BETWEEN 1000 AND 86400000),
    CONSTRAINT jobs_generation_pos CHECK (generation >= 0),
    CONSTRAINT jobs_errors_array   CHECK (jsonb_typeof(errors) = 'array'),
    -- a running job is owned: it has a token, an owner and a lease
    CONSTRAINT jobs_running_owned  CHECK (state <> 'running'
        OR (claim_token IS NOT NULL AND locked_until IS NOT NULL AND locked_by IS NOT NULL AND attempted_at IS NOT NULL)),
    -- a job that is not running has no lease and no owner
    CONSTRAINT jobs_idle_unowned   CHECK (state = 'running'
        OR (locked_until IS NULL AND locked_by IS NULL)),
    -- a ready job carries no token: the next claim mints one
    CONSTRAINT jobs_ready_no_token CHECK (state <> 'ready' OR claim_token IS NULL),
    -- final states carry their finish time; live ones do not
    CONSTRAINT jobs_finished_at    CHECK ((state IN ('succeeded', 'dead', 'cancelled')) = (finished_at IS NOT NULL)),
    -- a cancel request only exists on a job that was running when it was asked
    CONSTRAINT jobs_cancel_request CHECK (cancel_requested_at IS NULL OR state <> 'ready'),
    -- error codes are a bounded vocabulary of upper-case words (messages live in errors)
    CONSTRAINT jobs_error_code     CHECK (last_error_code IS NULL OR last_error_code ~ '^[A-Z][A-Z_]{0,39}$'),
    -- metadata is an object of strings, bounded (jobs.InsertOpts.Metadata validates first)
    CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(metadata) = 'object'
        AND NOT jsonb_path_exists(metadata, '$.* ? (@.type() != "string")')),
    CONSTRAINT jobs_metadata_size  CHECK (pg_column_size(metadata) <= 8192)
);

-- The claim index: only ready rows, in the order every fairness policy reads them
-- (per queue, per priority band, oldest first). Finished rows never enter it.
CREATE INDEX jobs_ready_idx ON tenure.jobs (queue, priority DESC, run_at, id) WHERE state = 'ready';

-- The lease-expiry sweep reads only leased rows (exactly the running ones, by the CHECKs
-- above), soonest expiry first. The predicate is on locked_until, not on state, on purpose: the
-- fenced batch writes (WHERE id = ... AND state = 'running' AND claim_token = ...) must reach
-- their rows through the primary key, and a partial index on state = 'running' tempts the
-- planner, whenever statistics were taken while nothing ran, into walking every running row
-- for each batch.
CREATE INDEX jobs_running_idx ON tenure.jobs (locked_until) WHERE locked_until IS NOT NULL;

-- Flow control (migration 0010): the limited claim counts running, leased jobs per limit group
-- (queue, kind, concurrency key = metadata "tenure.concurrency_key"). Only rows a limited claim
-- marked enter it, so unlimited kinds maintain no entry; the predicate is on locked_until (like
-- jobs_running_idx) so it never tempts the planner for the fenced writes.
CREATE INDEX jobs_limited_idx ON tenure.jobs (queue, kind, (metadata ->> 'tenure.concurrency_key'))
    WHERE locked_until IS NOT NULL AND limited;

-- Retention pruning and finished-job stats read final rows by finish time.
CREATE INDEX jobs_finished_idx ON tenure.jobs (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled');

-- Operators search dead jobs by queue and kind.
CREATE INDEX jobs_dead_idx ON tenure.jobs (queue, kind, id) WHERE state = 'dead';

-- The effect ledger (docs/contract.md §7): one row per (job, effect name), keyed by the stable
-- idempotency key job:{id}:effect:{name}. generation records which attempt produced the result;
-- a stale generation can never overwrite a newer one.
CREATE TABLE tenure.effects (
    key         text        PRIMARY KEY,
    job_id      bigint      NOT NULL,
    name        text        NOT NULL,
    generation  bigint      NOT NULL,
    result      jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT effects_name_len    CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT effects_result_size CHECK (pg_column_size(result) <= 65536),
    CONSTRAINT effects_job_name    UNIQUE (job_id, name)
);

-- Operator actions (re-inject, cancel, purge, retry, delete): who, when, why, what.
CREATE TABLE tenure.audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    action      text        NOT NULL,
    reason      text        NOT NULL,
    job_id      bigint,
    detail      jsonb       NOT NULL DEFAULT '{}',

    CONSTRAINT audit_actor_len  CHECK (char_length(actor) BETWEEN 1 AND 200),
    CONSTRAINT audit_reason_len CHECK (char_length(reason) BETWEEN 1 AND 2000),
    CONSTRAINT audit_action     CHECK (action IN ('reinject', 'cancel', 'purge', 'prune', 'retry', 'delete', 'pause', 'resume'))
);

CREATE INDEX audit_job_idx ON tenure.audit (job_id, id);

-- The worker registry (SPEC section 9: per-worker heartbeat age, last success, throughput).
-- One row per running worker process, upserted by its registry service every interval,
-- deleted when it stops gracefully, and aged out by the other workers once expires_at passed
-- (a killed process leaves its row behind until then).
CREATE TABLE tenure.workers (
    id              text        PRIMARY KEY,
    host            text        NOT NULL,
    pid             integer     NOT NULL,
    version         text        NOT NULL,
    queues          jsonb       NOT NULL DEFAULT '{}',
    started_at      timestamptz NOT NULL,
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    last_success_at timestamptz,
    counters        jsonb       NOT NULL DEFAULT '{}',

    CONSTRAINT workers_id_len         CHECK (char_length(id) BETWEEN 1 AND 200),
    CONSTRAINT workers_host_len       CHECK (char_length(host) <= 255),
    CONSTRAINT workers_version_len    CHECK (char_length(version) <= 100),
    CONSTRAINT workers_queues_object  CHECK (jsonb_typeof(queues) = 'object'),
    CONSTRAINT workers_counters_object CHECK (jsonb_typeof(counters) = 'object'),
    CONSTRAINT workers_expiry_after   CHECK (expires_at > heartbeat_at)
);

-- Periodic schedules (migration 0006): one row per schedule name, holding its next tick. A
-- worker enqueues tick T only in the transaction whose conditional UPDATE moved next_run_at
-- from T to a later tick, so each tick is enqueued at most once whatever the number of workers.
CREATE TABLE tenure.periodic (
    name             text        PRIMARY KEY,
    spec             text        NOT NULL,
    kind             text        NOT NULL,
    queue            text        NOT NULL,
    next_run_at      timestamptz NOT NULL,
    last_tick_at     timestamptz,
    last_enqueued_at timestamptz,
    last_job_id      bigint,
    missed           bigint      NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT periodic_name_len CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT periodic_spec_len CHECK (char_length(spec) BETWEEN 1 AND 300),
    CONSTRAINT periodic_missed   CHECK (missed >= 0)
);

-- Operator state per queue (migration 0006). A paused queue is not claimed from by any worker.
CREATE TABLE tenure.queues (
    name       text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    paused_at  timestamptz,
    updated_by text        NOT NULL,
    reason     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT queues_name_len    CHECK (char_length(name) BETWEEN 1 AND 128),
    CONSTRAINT queues_paused_at   CHECK (paused = (paused_at IS NOT NULL)),
    CONSTRAINT queues_actor_len   CHECK (char_length(updated_by) BETWEEN 1 AND 200),
    CONSTRAINT queues_reason_len  CHECK (char_length(reason) BETWEEN 1 AND 2000)
);

-- Flow control state (migration 0010): one row per rate-limit group (queue, kind or '' for all
-- kinds, concurrency key or '' when the limit is not per key), and per group a handler slowed
-- with RetryAfter. started counts the claims in the fixed window beginning at window_start on the
-- database clock; blocked_until stops the group's starts until then. Written only by limited
-- claims (under the queue's limits lock) and by RetryAfter pushes.
CREATE TABLE tenure.flow (
    queue         text        NOT NULL,
    kind          text        NOT NULL,
    key           text        NOT NULL,
    window_start  timestamptz NOT NULL DEFAULT 'epoch',
    started       integer     NOT NULL DEFAULT 0,
    blocked_until timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, kind, key),

    CONSTRAINT flow_started_pos CHECK (started >= 0)
);
