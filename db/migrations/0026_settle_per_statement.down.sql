-- Reverts 0026_settle_per_statement: the trigger settles each finished row by itself again
-- (as 0020_workflows created it).
DROP TRIGGER jobs_settle_dependents ON tenure.jobs;
DROP FUNCTION tenure.settle_dependents();
DROP FUNCTION tenure.settle_jobs(bigint[], text[]);

-- Settles the dependents of a job that just reached a final state (NEW): each unresolved edge
-- out of it is resolved, and each dependent still waiting is
--   released (waiting -> ready, due at its own run_at or now, with the new-job NOTIFY) when its
--   last pending edge resolved through a success, or a failure under on_failure = 'run';
--   cancelled (code DEPENDENCY_FAILED) when an edge failed under on_failure = 'cancel'; its own
--   dependents are then settled in the next round of the loop (not by a nested trigger: the
--   trigger fires at depth 0 only, so a chain of any length cancels without recursion);
--   left waiting for an edge that failed under on_failure = 'block'.
-- Its statement runs on a cached generic plan (plan_cache_mode: the custom plans PL/pgSQL
-- otherwise re-plans per call cost ~0.7 ms a release, 6x the statement itself).
-- Each round reads the edges by primary key (= ANY of the array: a join with the unnested
-- arrays lets the cached generic plan hash-join against a scan of the whole table, measured at
-- 0.7 ms a release with 2,000 edges, growing with the table) and the dependents by joining
-- per_job to the jobs' primary key. Not also by = ANY(ARRAY(SELECT ... FROM per_job)): with
-- statistics on job_deps the generic plan then looked the dependents up by that array and
-- rescanned per_job for each of them, N x N for a fan-out of N (20,000 tasks ran past the finish
-- deadline, so the root's finish was rolled back and retried for ever:
-- TestFanOutReleaseIsNotQuadratic). Under READ
-- COMMITTED a concurrent finish of another dependency of the same dependent waits for the
-- dependent's row lock and then decrements the committed count: counts are never lost.
CREATE FUNCTION tenure.settle_dependents() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    ids    bigint[] := ARRAY[NEW.id];
    states text[]   := ARRAY[NEW.state::text];
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
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_settle_dependents
    AFTER UPDATE OF state ON tenure.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.state IS DISTINCT FROM NEW.state
          AND NEW.state IN ('succeeded', 'dead', 'cancelled') AND pg_trigger_depth() = 0)
    EXECUTE FUNCTION tenure.settle_dependents();
