-- Periodic (cron and interval) schedules and cluster-wide queue pause.
--
-- tenure.periodic: one row per schedule name, holding its next tick. A worker enqueues tick T
-- only in the transaction whose conditional UPDATE moved next_run_at from T to a later tick,
-- so each tick is enqueued at most once whatever the number of workers.
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

-- tenure.queues: operator state per queue. A paused queue is not claimed from by any worker.
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

-- Pausing and resuming a queue are audited operator actions.
ALTER TABLE tenure.audit DROP CONSTRAINT audit_action;
ALTER TABLE tenure.audit ADD CONSTRAINT audit_action
    CHECK (action IN ('reinject', 'cancel', 'purge', 'prune', 'retry', 'delete', 'pause', 'resume'));
