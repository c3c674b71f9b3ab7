-- Dependents are settled once per statement, not once per finished row (issue 30 item 4).
-- The trigger of 0020 ran tenure.settle_dependents() for each row that reached a final state:
-- a CompleteMany of 100 tasks of one fan-in ran the release statement 100 times and wrote 100
-- versions of the join's row, each holding the row's lock to the end of its transaction. The
-- trigger now reads the statement's transition table: the first final row whose edges still
-- need settling settles every final row of the statement at once (tenure.settle_jobs, the
-- loop of 0020's function over arrays of jobs), and each dependent is decremented once by the
-- number of its dependencies the statement finished. The release stays in the statement, and
-- so the transaction, that finished the last dependency; what a dependent waits for, what it
-- is released or cancelled by, and the edges' resolved flags are unchanged.
DROP TRIGGER jobs_settle_dependents ON tenure.jobs;
DROP FUNCTION tenure.settle_dependents();

-- Settles the dependents of jobs that just reached a final state (ids, with their states):
-- each unresolved edge out of them is resolved, and each dependent still waiting is
--   released (waiting -> ready, due at its own run_at or now, with the new-job NOTIFY) when its
--   last pending edge resolved through a success, or a failure under on_failure = 'run';
--   cancelled (code DEPENDENCY_FAILED) when an edge failed under on_failure = 'cancel'; its own
--   dependents are then settled in the next round of the loop (not by a nested trigger: the
--   trigger fires at depth 0 only, so a chain of any length cancels without recursion);
--   left waiting for an edge that failed under on_failure = 'block'.
-- A dependent waiting on several of the jobs is decremented once, by their number (per_job),
-- so a statement that finished 100 tasks of a fan-in writes one version of the join's row,
-- not 100 (migration 0026). Dependents are updated in id order (per_job is sorted and drives
-- the nested loop), so two settling statements lock the dependents they share in one order.
-- Its statement runs on a cached generic plan (plan_cache_mode: the custom plans PL/pgSQL
-- otherwise re-plans per call cost ~0.7 ms a release, 6x the statement itself).
-- Each round reads the edges by primary key (= ANY of the array: a join with the unnested
-- arrays lets the cached generic plan hash-join against a scan of the whole table, measured at
-- 0.7 ms a release with 2,000 edges, growing with the table) and the dependents by joining
-- per_job to the jobs' primary key. Not also by = ANY(ARRAY(SELECT ... FROM per_job)): with
-- statistics on job_deps the generic plan then looked the dependents up by that array and
-- rescanned per_job for each of them, N x N for a fan-out of N (20,000 tasks ran past the finish
-- deadline, so the root's finish was rolled back and retried for ever:
-- TestFanOutReleaseIsNotQuadratic).
-- Counts are never lost under READ COMMITTED: the decrement is an UPDATE of the dependent's
-- row, so a concurrent settle of other dependencies of the same dependent waits for the row
-- lock and then re-evaluates its SET and WHERE on the committed version (EvalPlanQual): it
-- subtracts its own n from the count the other transaction left, and sees the state that
-- transaction set (a released or cancelled dependent is no longer 'waiting': changed nothing).
-- Exactly one of them takes the count to 0 and releases. An edge is resolved by the settle of
-- its dependency alone, which runs in the statement that moved that dependency to a final
-- state while holding its row: an edge is counted once.
CREATE FUNCTION tenure.settle_jobs(ids bigint[], states text[]) RETURNS void
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

-- The trigger: a row that reached a final state (its WHEN) settles every such row of its
-- statement at once (migration 0026). The first row of a statement whose edges still need
-- settling passes all the statement's final rows with dependents (the transition table
-- settled_rows: the statement's new row versions) to settle_jobs; the rows after it then find
-- their edges resolved (one index probe each) and return. A row the batch did not cover (none
-- can be: it is in the transition table) would find its own edges unresolved and settle them
-- itself, so a release never depends on which row came first. Rows that were final already
-- (settled_rows has no old state) have no edge left to resolve: a final job's edges were
-- resolved when it got there, except 'block' edges of a failed one, which only a success
-- resolves. Per statement, not per row: one release statement for a CompleteMany of 100 tasks,
-- each dependent decremented once by its count (measured in docs/design.md "Workflows and
-- sequences"). A transition table forbids a column list (UPDATE OF state), so the WHEN is
-- evaluated for every updated row (a NULL has_dependents ends it) and every UPDATE of
-- tenure.jobs keeps its new rows for the statement (a tuple copy each, dropped at its end).
CREATE FUNCTION tenure.settle_dependents() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ids    bigint[];
    states text[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tenure.job_deps d
                   WHERE d.dep_id = NEW.id AND NOT d.resolved
                     AND (NEW.state::text = 'succeeded' OR d.on_failure <> 'block')) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.id ORDER BY n.id), array_agg(n.state::text ORDER BY n.id)
    INTO ids, states
    FROM settled_rows n
    WHERE n.has_dependents AND n.state::text IN ('succeeded', 'dead', 'cancelled');
    PERFORM tenure.settle_jobs(coalesce(ids, ARRAY[NEW.id]), coalesce(states, ARRAY[NEW.state::text]));
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_settle_dependents
    AFTER UPDATE ON tenure.jobs
    REFERENCING NEW TABLE AS settled_rows
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.state IS DISTINCT FROM NEW.state
          AND NEW.state IN ('succeeded', 'dead', 'cancelled') AND pg_trigger_depth() = 0)
    EXECUTE FUNCTION tenure.settle_dependents();
