-- Reverts 0028_striped_join: every dependent keeps its count on its row again. The count left
-- of a striped dependent still waiting (the sum of its stripes) is written back to deps_pending
-- first.
UPDATE tenure.jobs j
SET deps_pending = s.pending
FROM (SELECT t.job_id, sum(t.pending)::integer AS pending FROM tenure.job_dep_stripes t GROUP BY t.job_id) s
WHERE j.id = s.job_id AND j.state::text = 'waiting';

-- settle_jobs as 0026 created it
CREATE OR REPLACE FUNCTION tenure.settle_jobs(ids bigint[], states text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    WHILE cardinality(ids) > 0 LOOP
        WITH settled AS (
            UPDATE tenure.job_deps d
            SET resolved = true
            FROM unnest(ids, states) AS f(id, st)
            WHERE d.dep_id = ANY (ids) AND d.dep_id = f.id AND NOT d.resolved
              AND (f.st = 'succeeded' OR d.on_failure <> 'block')
            RETURNING d.job_id, d.dep_id, f.st, (f.st = 'succeeded' OR d.on_failure = 'run') AS release
        ), per_job AS (
            SELECT s.job_id,
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
              AND j.state::text = 'waiting'
            RETURNING j.id, j.state::text AS state, j.has_dependents, j.queue, j.priority, j.run_at
        ), woken AS (
            -- the new-job signal (InsertJob's payload) for each queue and band given due jobs
            SELECT count(pg_notify('tenure_jobs', r.queue || chr(31) || r.priority || chr(31)
                                   || (extract(epoch FROM r.run_at) * 1000000)::bigint)) AS n
            FROM (SELECT c.queue, c.priority, min(c.run_at) AS run_at FROM changed c
                  WHERE c.state = 'ready' AND c.run_at <= now()
                  GROUP BY c.queue, c.priority) r
        ), ended AS (
            -- the done signal (CompleteMany's payload: ids, 350 a message) for the dependents
            -- this round cancelled: they reached a final state (jobs.Client.Wait)
            SELECT count(pg_notify('tenure_done', e.ids)) AS n
            FROM (SELECT string_agg(x.id::text, ',') AS ids
                  FROM (SELECT c.id, row_number() OVER () AS rn FROM changed c WHERE c.state = 'cancelled') x
                  GROUP BY (x.rn - 1) / 350) e
        )
        SELECT coalesce(array_agg(c.id) FILTER (WHERE c.state = 'cancelled' AND coalesce(c.has_dependents, false)), '{}'),
               coalesce(array_agg(c.state) FILTER (WHERE c.state = 'cancelled' AND coalesce(c.has_dependents, false)), '{}')
        INTO ids, states
        FROM woken w CROSS JOIN ended LEFT JOIN changed c ON true;
    END LOOP;
END
$$;

DROP FUNCTION tenure.insert_deps(bigint[], bigint[], text[]);
DROP TABLE tenure.job_dep_stripes;
ALTER TABLE tenure.job_deps DROP COLUMN stripe;
ALTER TABLE tenure.job_deps RESET (fillfactor);

-- the grant functions as 0020 and 0023 left them
CREATE OR REPLACE FUNCTION tenure.grant_reader(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT', 'effects:SELECT', 'audit:SELECT', 'workers:SELECT', 'periodic:SELECT',
        'queues:SELECT', 'flow:SELECT', 'flow_grant:SELECT', 'flow_permit:SELECT', 'outbox:SELECT',
        'stream_effects:SELECT', 'schema_migrations:SELECT', 'kinds:SELECT', 'job_deps:SELECT',
        'sequences:SELECT'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE (has_dependents)', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT',
        'kinds:SELECT', 'job_deps:SELECT, INSERT', 'sequences:SELECT, INSERT, UPDATE'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_operator(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_reader(role)
    UNION ALL
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:UPDATE, DELETE', 'effects:DELETE', 'audit:INSERT', 'queues:INSERT, UPDATE',
        'job_deps:UPDATE, DELETE'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_worker(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE, DELETE', 'effects:SELECT, INSERT, UPDATE, DELETE',
        'workers:SELECT, INSERT, UPDATE, DELETE', 'periodic:SELECT, INSERT, UPDATE', 'queues:SELECT',
        'flow:SELECT, INSERT, UPDATE, DELETE', 'flow_grant:SELECT, INSERT, UPDATE',
        'flow_permit:SELECT, INSERT, UPDATE, DELETE', 'outbox:SELECT, INSERT, UPDATE, DELETE',
        'stream_effects:SELECT, INSERT, UPDATE, DELETE', 'schema_migrations:SELECT',
        'kinds:SELECT, INSERT, UPDATE, DELETE', 'job_deps:SELECT, UPDATE, DELETE',
        'sequences:SELECT, UPDATE, DELETE'])
$$;
