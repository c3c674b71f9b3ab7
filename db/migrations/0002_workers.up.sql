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
