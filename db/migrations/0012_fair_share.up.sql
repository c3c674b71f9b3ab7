-- Fair share (issue 16, part 3): per-tenant round robin within a priority band. A job's tenant
-- is its metadata entry "tenure.fair_key" (jobs.InsertOpts.FairKey). The fair claim
-- (worker/fairshare.go, ClaimFair) finds the tenants with ready jobs of a band by a skip scan
-- of this index and reads each tenant's oldest jobs from it. Only keyed ready rows enter it, so
-- queues that do not use fair share maintain no entry.
CREATE INDEX jobs_fair_idx ON tenure.jobs (queue, priority, (metadata ->> 'tenure.fair_key'), run_at, id)
    WHERE state = 'ready' AND (metadata ->> 'tenure.fair_key') IS NOT NULL;

-- The tenants (fair keys) of one band of a queue with ready jobs, in rotation order: the keys
-- after after_key, then from the first key up to after_key; at most max_keys of them, in order.
-- A skip scan of jobs_fair_idx, one index descent per tenant. known/known_after_us are tenants
-- the engine has claimed from, each with its watermark (every ready job of the tenant due
-- before it was claimed): a known tenant is checked by a descent to its watermark, so the index
-- entries its claims left behind at the front of its range (dead until VACUUM) are not walked;
-- the keys between two known ones are searched by a descent bounded by the next known key. Used
-- by the fair claim (db/queries.sql, ClaimFair).
CREATE FUNCTION tenure.fair_keys(q text, prio smallint, after_key text, max_keys integer,
                                 known text[], known_after_us bigint[])
RETURNS SETOF text
LANGUAGE plpgsql STABLE PARALLEL SAFE ROWS 20 AS $$
DECLARE
    n       integer := 0;
    cur     text := after_key;   -- keys > cur are next (NULL: from the first key)
    wrapped boolean := false;    -- second pass: from the first key up to after_key
    i       integer := 1;        -- next known key: known[i]
    len     integer := coalesce(array_length(known, 1), 0);
    nk      text;
    k       text;
BEGIN
    WHILE i <= len AND known[i] <= cur LOOP
        i := i + 1;
    END LOOP;
    WHILE n < max_keys LOOP
        nk := NULL;
        IF i <= len AND (NOT wrapped OR known[i] <= after_key) THEN
            nk := known[i];
        END IF;
        -- an unknown tenant before the next known one (each bound its own statement, so that
        -- every one is an index range in a cached generic plan)
        IF cur IS NOT NULL AND nk IS NOT NULL THEN
            SELECT j.metadata ->> 'tenure.fair_key' INTO k FROM tenure.jobs j
            WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL AND j.queue = q AND j.priority = prio
              AND (j.metadata ->> 'tenure.fair_key') > cur AND (j.metadata ->> 'tenure.fair_key') < nk
            ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1;
        ELSIF cur IS NOT NULL AND NOT wrapped THEN
            SELECT j.metadata ->> 'tenure.fair_key' INTO k FROM tenure.jobs j
            WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL AND j.queue = q AND j.priority = prio
              AND (j.metadata ->> 'tenure.fair_key') > cur
            ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1;
        ELSIF cur IS NOT NULL THEN
            SELECT j.metadata ->> 'tenure.fair_key' INTO k FROM tenure.jobs j
            WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL AND j.queue = q AND j.priority = prio
              AND (j.metadata ->> 'tenure.fair_key') > cur AND (j.metadata ->> 'tenure.fair_key') <= after_key
            ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1;
        ELSIF nk IS NOT NULL THEN
            SELECT j.metadata ->> 'tenure.fair_key' INTO k FROM tenure.jobs j
            WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL AND j.queue = q AND j.priority = prio
              AND (j.metadata ->> 'tenure.fair_key') < nk
            ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1;
        ELSE
            SELECT j.metadata ->> 'tenure.fair_key' INTO k FROM tenure.jobs j
            WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL AND j.queue = q AND j.priority = prio
              AND (j.metadata ->> 'tenure.fair_key') <= after_key
            ORDER BY j.metadata ->> 'tenure.fair_key' LIMIT 1;
        END IF;
        IF k IS NULL AND nk IS NOT NULL THEN
            -- the known tenant, if it has a ready job at or after its watermark
            PERFORM 1 FROM tenure.jobs j
            WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL
              AND j.queue = q AND j.priority = prio AND (j.metadata ->> 'tenure.fair_key') = nk
              AND j.run_at >= 'epoch'::timestamptz + known_after_us[i] * interval '1 microsecond'
            LIMIT 1;
            i := i + 1;
            cur := nk;
            IF NOT FOUND THEN
                CONTINUE;
            END IF;
            k := nk;
        ELSIF k IS NULL THEN
            EXIT WHEN wrapped OR after_key IS NULL;
            wrapped := true;  -- from the first key up to after_key
            cur := NULL;
            i := 1;
            CONTINUE;
        ELSE
            cur := k;
        END IF;
        RETURN NEXT k;
        n := n + 1;
    END LOOP;
END
$$;
