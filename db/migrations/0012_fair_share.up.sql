-- Fair share (issue 16, part 3): per-tenant round robin within a priority band. A job's tenant
-- is its metadata entry "tenure.fair_key" (jobs.InsertOpts.FairKey). The fair claim
-- (worker/fairshare.go, ClaimFair) finds the tenants with ready jobs of a band by a skip scan
-- of this index and reads each tenant's oldest jobs from it. Only keyed ready rows enter it, so
-- queues that do not use fair share maintain no entry.
CREATE INDEX jobs_fair_idx ON tenure.jobs (queue, priority, (metadata ->> 'tenure.fair_key'), run_at, id)
    WHERE state = 'ready' AND (metadata ->> 'tenure.fair_key') IS NOT NULL;

-- The tenants (fair keys) of one band of a queue with ready jobs, in rotation order: the keys
-- after after_key, then from the first key up to after_key; at most max_keys of them, in order. A skip scan
-- of jobs_fair_idx: one index descent per key, whatever each tenant's backlog. Used by the fair
-- claim (db/queries.sql, ClaimFair).
CREATE FUNCTION tenure.fair_keys(q text, prio smallint, after_key text, max_keys integer)
RETURNS SETOF text
LANGUAGE sql STABLE PARALLEL SAFE ROWS 20 AS $$
    WITH RECURSIVE walk(key, wrapped, pos) AS (
        SELECT f.key, f.wrapped, 1 FROM (
            (SELECT j.metadata ->> 'tenure.fair_key' AS key, false AS wrapped FROM tenure.jobs j
             WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL
               AND j.queue = q AND j.priority = prio AND (j.metadata ->> 'tenure.fair_key') > after_key
             ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1)
            UNION ALL
            (SELECT j.metadata ->> 'tenure.fair_key', true FROM tenure.jobs j
             WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL
               AND j.queue = q AND j.priority = prio AND (j.metadata ->> 'tenure.fair_key') <= after_key
             ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1)
            LIMIT 1) f
        UNION ALL
        SELECT n.key, n.wrapped, w.pos + 1
        FROM walk w CROSS JOIN LATERAL (
            (SELECT j.metadata ->> 'tenure.fair_key' AS key, w.wrapped FROM tenure.jobs j
             WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL
               AND j.queue = q AND j.priority = prio AND (j.metadata ->> 'tenure.fair_key') > w.key
               AND (NOT w.wrapped OR (j.metadata ->> 'tenure.fair_key') <= after_key)
             ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1)
            UNION ALL
            (SELECT j.metadata ->> 'tenure.fair_key', true FROM tenure.jobs j
             WHERE NOT w.wrapped AND j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL
               AND j.queue = q AND j.priority = prio AND (j.metadata ->> 'tenure.fair_key') <= after_key
             ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1)
            LIMIT 1) n
        WHERE w.pos < max_keys
    )
    SELECT walk.key FROM walk ORDER BY walk.pos
$$;
