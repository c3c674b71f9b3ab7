-- The signals of a release after the commit (issue 30 item 4): tenure.settle_jobs sends no
-- NOTIFY (the new-job wake-up of the dependents it released, the done signal of those it
-- cancelled) when the transaction set tenure.signals to 'after_commit', as the engine's finish
-- statements (CompleteMany, FailMany, ReleaseMany, SnoozeMany) do: the engine then sends both
-- after the commit (NotifyDoneSettled reads what the finished jobs' dependents became). A NOTIFY
-- in a writing transaction holds PostgreSQL's one notification-queue lock from the commit's
-- start through its WAL flush, so every finish that released something serialized with every
-- other notifying commit. Every other caller (CompleteTx, an operator's cancel, a finish
-- written in SQL) still notifies in its own transaction.
CREATE OR REPLACE FUNCTION tenure.settle_jobs(ids bigint[], states text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    z_ids   bigint[];
    z_fail  boolean[];
    z_dep   bigint[];
    z_state text[];
    s_job   bigint[];
    s_strip smallint[];
    s_n     integer[];
    zeroed  bigint[];
    more_ids    bigint[];
    more_states text[];
    -- set (transaction-local) by the engine's finish statements, which send these signals
    -- after their commit (NotifyDoneSettled); every other caller notifies in its transaction, and
    -- so does a round that resolved 1,000 edges or more (a mass release: one notifying commit,
    -- where NotifyDoneMany would read every dependent back; it reads at most 1,000 a job)
    quiet   boolean := coalesce(current_setting('tenure.signals', true), '') = 'after_commit';
BEGIN
    WHILE cardinality(ids) > 0 LOOP
        WITH settled AS (
            UPDATE tenure.job_deps d
            SET resolved = true
            FROM unnest(ids, states) AS f(id, st)
            WHERE d.dep_id = ANY (ids) AND d.dep_id = f.id AND NOT d.resolved
              AND (f.st = 'succeeded' OR d.on_failure <> 'block')
            RETURNING d.job_id, d.dep_id, d.stripe, f.st, (f.st = 'succeeded' OR d.on_failure = 'run') AS release
        ), per_stripe AS (
            SELECT s.job_id, s.stripe, count(*)::integer AS n
            FROM settled s
            WHERE s.stripe IS NOT NULL AND s.release
            GROUP BY s.job_id, s.stripe
            ORDER BY s.job_id, s.stripe
        ), per_job AS (
            SELECT s.job_id,
                   bool_or(s.stripe IS NOT NULL) AS striped,
                   (count(*) FILTER (WHERE s.release))::integer AS n,
                   coalesce(bool_or(NOT s.release), false) AS cancel,
                   (array_agg(s.dep_id ORDER BY s.dep_id) FILTER (WHERE NOT s.release))[1] AS failed_dep,
                   (array_agg(s.st ORDER BY s.dep_id) FILTER (WHERE NOT s.release))[1] AS failed_state
            FROM settled s
            GROUP BY s.job_id
            ORDER BY s.job_id
        ), changed AS (
            UPDATE tenure.jobs j
            SET deps_pending = coalesce(j.deps_pending, 0) - p.n,
                state = CASE WHEN p.cancel THEN 'cancelled'::tenure.job_state
                             WHEN coalesce(j.deps_pending, 0) - p.n = 0 THEN 'ready'::tenure.job_state
                             ELSE j.state END,
                run_at = CASE WHEN NOT p.cancel AND coalesce(j.deps_pending, 0) - p.n = 0 THEN greatest(j.run_at, now())
                              ELSE j.run_at END,
                finished_at = CASE WHEN p.cancel THEN now() END,
                last_error_code = CASE WHEN p.cancel THEN 'DEPENDENCY_FAILED' ELSE j.last_error_code END,
                errors = CASE WHEN p.cancel
                              THEN (CASE WHEN jsonb_array_length(j.errors) >= 10 THEN j.errors - 0 ELSE j.errors END)
                                   || jsonb_build_array(jsonb_build_object(
                                          'attempt', j.attempts, 'generation', j.generation, 'code', 'DEPENDENCY_FAILED',
                                          'message', format('dependency job %s ended %s', p.failed_dep, p.failed_state),
                                          'at', now()))
                              ELSE j.errors END,
                updated_at = now()
            FROM per_job p
            WHERE j.id = p.job_id
              AND NOT p.striped
              AND j.state::text = 'waiting'
            RETURNING j.id, j.state::text AS state, j.has_dependents, j.queue, j.priority, j.run_at
        ), woken AS (
            -- the new-job signal (InsertJob's payload) for each queue and band given due jobs
            SELECT count(pg_notify('tenure_jobs', r.queue || chr(31) || r.priority || chr(31)
                                   || (extract(epoch FROM r.run_at) * 1000000)::bigint)) AS n
            FROM (SELECT c.queue, c.priority, min(c.run_at) AS run_at FROM changed c
                  WHERE c.state = 'ready' AND c.run_at <= now()
                  GROUP BY c.queue, c.priority) r
            WHERE NOT quiet OR (SELECT count(*) FROM settled) >= 1000
        ), ended AS (
            -- the done signal (CompleteMany's payload: ids, 350 a message) for the dependents
            -- this round cancelled: they reached a final state (jobs.Client.Wait)
            SELECT count(pg_notify('tenure_done', e.ids)) AS n
            FROM (SELECT string_agg(x.id::text, ',') AS ids
                  FROM (SELECT c.id, row_number() OVER () AS rn FROM changed c WHERE c.state = 'cancelled') x
                  GROUP BY (x.rn - 1) / 350) e
            WHERE NOT quiet OR (SELECT count(*) FROM settled) >= 1000
        ), striped AS (
            -- the striped dependents: cancelled, or released if a stripe reaches 0 (below)
            SELECT p.job_id, p.cancel, p.failed_dep, p.failed_state
            FROM per_job p
            WHERE p.striped
        )
        SELECT coalesce((SELECT array_agg(c.id) FROM changed c
                         WHERE c.state = 'cancelled' AND coalesce(c.has_dependents, false)), '{}'),
               coalesce((SELECT array_agg(c.state) FROM changed c
                         WHERE c.state = 'cancelled' AND coalesce(c.has_dependents, false)), '{}'),
               coalesce((SELECT array_agg(z.job_id ORDER BY z.job_id) FROM striped z), '{}'),
               coalesce((SELECT array_agg(z.cancel ORDER BY z.job_id) FROM striped z), '{}'),
               coalesce((SELECT array_agg(z.failed_dep ORDER BY z.job_id) FROM striped z), '{}'),
               coalesce((SELECT array_agg(z.failed_state ORDER BY z.job_id) FROM striped z), '{}'),
               coalesce((SELECT array_agg(p.job_id ORDER BY p.job_id, p.stripe) FROM per_stripe p), '{}'),
               coalesce((SELECT array_agg(p.stripe ORDER BY p.job_id, p.stripe) FROM per_stripe p), '{}'),
               coalesce((SELECT array_agg(p.n ORDER BY p.job_id, p.stripe) FROM per_stripe p), '{}')
        INTO more_ids, more_states, z_ids, z_fail, z_dep, z_state, s_job, s_strip, s_n
        FROM woken w CROSS JOIN ended;

        IF cardinality(s_job) > 0 THEN
            -- 1b. the stripes, locked in (job_id, stripe) order (a hash join would read the
            --     table in its physical order, which a concurrent update changes), decremented.
            --     A separate statement, run only when striped edges were resolved: settling
            --     jobs of no striped dependent never reads the stripes table.
            WITH p AS (
                SELECT * FROM unnest(s_job, s_strip, s_n) AS u(job_id, stripe, n)
            ), locked AS (
                SELECT t.job_id, t.stripe
                FROM tenure.job_dep_stripes t
                JOIN p ON t.job_id = p.job_id AND t.stripe = p.stripe
                WHERE t.job_id = ANY (s_job)
                ORDER BY t.job_id, t.stripe
                FOR NO KEY UPDATE OF t
            ), decremented AS (
                UPDATE tenure.job_dep_stripes t
                SET pending = t.pending - p.n
                FROM p, locked l
                WHERE t.job_id = ANY (s_job) AND t.job_id = p.job_id AND t.stripe = p.stripe
                  AND l.job_id = p.job_id AND l.stripe = p.stripe
                RETURNING t.job_id, t.pending
            )
            SELECT coalesce(array_agg(DISTINCT d.job_id) FILTER (WHERE d.pending = 0), '{}')
            INTO zeroed
            FROM decremented d;
        ELSE
            zeroed := '{}';
        END IF;
        -- the striped dependents to settle in steps 2-3: cancelled, or a stripe of which reached 0
        SELECT coalesce(array_agg(z.job_id ORDER BY z.job_id), '{}'), coalesce(array_agg(z.cancel ORDER BY z.job_id), '{}'),
               coalesce(array_agg(z.failed_dep ORDER BY z.job_id), '{}'), coalesce(array_agg(z.failed_state ORDER BY z.job_id), '{}')
        INTO z_ids, z_fail, z_dep, z_state
        FROM unnest(z_ids, z_fail, z_dep, z_state) AS z(job_id, cancel, failed_dep, failed_state)
        WHERE z.cancel OR z.job_id = ANY (zeroed);

        IF cardinality(z_ids) > 0 THEN
            -- 2. the striped dependents' rows, in id order
            PERFORM 1 FROM (SELECT j.id FROM tenure.jobs j WHERE j.id = ANY (z_ids) ORDER BY j.id
                            FOR NO KEY UPDATE OF j) l;
            -- 3. a fresh snapshot: every stripe zeroed by a transaction that held one of these
            --    locks before is seen committed
            WITH changed AS (
                UPDATE tenure.jobs j
                SET deps_pending = CASE WHEN p.cancel THEN j.deps_pending ELSE 0 END,
                    state = CASE WHEN p.cancel THEN 'cancelled'::tenure.job_state ELSE 'ready'::tenure.job_state END,
                    run_at = CASE WHEN p.cancel THEN j.run_at ELSE greatest(j.run_at, now()) END,
                    finished_at = CASE WHEN p.cancel THEN now() END,
                    last_error_code = CASE WHEN p.cancel THEN 'DEPENDENCY_FAILED' ELSE j.last_error_code END,
                    errors = CASE WHEN p.cancel
                                  THEN (CASE WHEN jsonb_array_length(j.errors) >= 10 THEN j.errors - 0 ELSE j.errors END)
                                       || jsonb_build_array(jsonb_build_object(
                                              'attempt', j.attempts, 'generation', j.generation, 'code', 'DEPENDENCY_FAILED',
                                              'message', format('dependency job %s ended %s', p.failed_dep, p.failed_state),
                                              'at', now()))
                                  ELSE j.errors END,
                    updated_at = now()
                FROM unnest(z_ids, z_fail, z_dep, z_state) AS p(job_id, cancel, failed_dep, failed_state)
                WHERE j.id = ANY (z_ids) AND j.id = p.job_id
                  AND j.state::text = 'waiting'
                  AND (p.cancel OR NOT EXISTS (SELECT 1 FROM tenure.job_dep_stripes t
                                               WHERE t.job_id = j.id AND t.pending > 0))
                RETURNING j.id, j.state::text AS state, j.has_dependents, j.queue, j.priority, j.run_at
            ), gone AS (
                -- a released job's stripes are all 0: no finish holds or will take them
                DELETE FROM tenure.job_dep_stripes t
                WHERE t.job_id = ANY (z_ids) AND t.job_id IN (SELECT c.id FROM changed c WHERE c.state = 'ready')
            ), woken AS (
                SELECT count(pg_notify('tenure_jobs', r.queue || chr(31) || r.priority || chr(31)
                                       || (extract(epoch FROM r.run_at) * 1000000)::bigint)) AS n
                FROM (SELECT c.queue, c.priority, min(c.run_at) AS run_at FROM changed c
                      WHERE c.state = 'ready' AND c.run_at <= now()
                      GROUP BY c.queue, c.priority) r
                WHERE NOT quiet
            ), ended AS (
                SELECT count(pg_notify('tenure_done', e.ids)) AS n
                FROM (SELECT string_agg(x.id::text, ',') AS ids
                      FROM (SELECT c.id, row_number() OVER () AS rn FROM changed c WHERE c.state = 'cancelled') x
                      GROUP BY (x.rn - 1) / 350) e
                WHERE NOT quiet
            )
            SELECT more_ids || coalesce((SELECT array_agg(c.id) FROM changed c
                                         WHERE c.state = 'cancelled' AND coalesce(c.has_dependents, false)), '{}'),
                   more_states || coalesce((SELECT array_agg(c.state) FROM changed c
                                            WHERE c.state = 'cancelled' AND coalesce(c.has_dependents, false)), '{}')
            INTO more_ids, more_states
            FROM woken w CROSS JOIN ended;
        END IF;
        ids := more_ids;
        states := more_states;
    END LOOP;
END
$$;
