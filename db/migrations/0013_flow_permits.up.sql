-- Flow control near small limits (issue 16): per-worker permits (worker/permits.go).
-- Permits (migration 0013): near a small concurrency limit, each worker holds a share of the limit
-- and claims within it without taking the queue's lock (worker/permits.go). One row per (queue,
-- worker, limit kind or '') of a queue in permit mode: amount = how many of the limit's jobs the
-- worker may have running (its claims count its own running, leased jobs against it, under this
-- row's lock); want = the worker's slots for the queue; expires_at = when other workers may take
-- the share back (the worker's claims renew it). Amounts change only in PermitAllocate, which
-- holds the queue's limit stripes and every row of the queue.
CREATE TABLE tenure.flow_permit (
    queue       text        NOT NULL,
    worker_id   text        NOT NULL,
    kind        text        NOT NULL,
    max_running integer     NOT NULL,
    amount      integer     NOT NULL DEFAULT 0,
    want        integer     NOT NULL DEFAULT 0,
    expires_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, worker_id, kind),

    CONSTRAINT flow_permit_amount_pos CHECK (amount >= 0),
    CONSTRAINT flow_permit_want_pos   CHECK (want >= 0)
);
