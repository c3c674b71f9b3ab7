-- Flow control (issue 16): global concurrency limits and rate limits, enforced in the claim.
-- `limited` is set by the limited claim (worker/limits.go) on the rows it claims of kinds a
-- concurrency limit covers; only those running rows enter jobs_limited_idx, so claims, heartbeats
-- and finishes of unlimited kinds maintain no extra index entry. Adding a NOT NULL column with a
-- constant default rewrites nothing (PostgreSQL 11+); the index starts empty (no running row is
-- limited yet).
ALTER TABLE tenure.jobs ADD COLUMN limited boolean NOT NULL DEFAULT false;

-- The limited claim counts running, leased jobs per limit group (queue, kind, concurrency key).
-- The key is the job's metadata entry "tenure.concurrency_key" (jobs.InsertOpts.ConcurrencyKey).
CREATE INDEX jobs_limited_idx ON tenure.jobs (queue, kind, (metadata ->> 'tenure.concurrency_key'))
    WHERE locked_until IS NOT NULL AND limited;

-- One row per rate-limit group (and per group a handler slowed with RetryAfter): the starts in
-- the current fixed window on the database clock, and a time before which the group starts
-- nothing. Written only inside limited claims, which hold the queue's limits lock.
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
