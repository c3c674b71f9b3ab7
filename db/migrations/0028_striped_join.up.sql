-- A fan-in's pending count is striped out of the join's row (issue 30 item 4, migration 0028).
--
-- Until 0027 every finish of a dependency decremented deps_pending on the dependent's row in
-- tenure.jobs: a new version of the join's row per finishing statement, and the row's lock held
-- to the end of the finishing transaction (with the claim that rides on it and the commit's WAL
-- flush), so the finishers of one fan-in committed one after another
-- (bench/results/2026-12-04-join.md: a 20,000-task fan-in spent most of its finishes waiting
-- for that lock, transactionid/tuple waits of CompleteMany).
--
-- A dependent with many dependencies (tenure.insert_deps: 32 or more) now keeps its count in
-- tenure.job_dep_stripes instead: its edges are dealt round robin (in dep_id order) into
-- least(128, n / 8) stripes, each edge remembers its stripe (job_deps.stripe), and each stripe
-- row counts its unresolved edges. A finish decrements the stripes of its own edges only, so
-- concurrent finishers of one fan-in (whose tasks' ids are consecutive, and dealt to different
-- stripes) lock different rows. Only a finish that brings a stripe to 0 takes the join's row
-- lock and then, in a later statement (a fresh READ COMMITTED snapshot, taken after the lock was
-- granted), re-reads all its stripes and releases the join if every one is 0. Of two finishers
-- that each zero a stripe, the one granted the lock second sees the first's zero (the first
-- held the lock until its commit, and decremented before locking): exactly one releases, and
-- the release stays in the statement, and so the transaction, of the finish that resolved the
-- last dependency. A job with fewer dependencies keeps the count on its row (deps_pending), as
-- before: one row write, no stripe, and nothing to contend with.
--
-- deps_pending of a striped dependent keeps its number of dependencies until it is released
-- (then 0); the count left is the sum of its stripes (or its unresolved edges).

-- The stripe of an edge into a striped dependent; NULL: the count is on the dependent's row.
ALTER TABLE tenure.job_deps ADD COLUMN stripe smallint;

-- Room on each page of tenure.job_deps for the new version of an edge: resolving an edge
-- (resolved = true, no indexed column) is then a HOT update, with no new entries in its two
-- indexes. The mass release of a 1 -> 100,000 fan-out resolves 100,000 edges in the root's
-- finish statement: EXPLAIN (ANALYZE, BUFFERS) of it, alternated, 4 runs: the edges' update
-- 1.0-1.3 s with the default fillfactor, 0.29-0.34 s with 50; the statement 5.2-5.4 s against
-- 3.9-4.7 s (bench/results/2026-12-04-join.md). Only pages written from now on are affected.
ALTER TABLE tenure.job_deps SET (fillfactor = 50);

-- The unresolved edges of a striped dependent, per stripe. Rows are created with the edges and
-- deleted by the release (or with the job: pruning, Delete). pending is never indexed, so a
-- decrement is a HOT update; half of each page is left free for them.
CREATE TABLE tenure.job_dep_stripes (
    job_id  bigint   NOT NULL,
    stripe  smallint NOT NULL,
    pending integer  NOT NULL,
    PRIMARY KEY (job_id, stripe),

    CONSTRAINT job_dep_stripes_pending CHECK (pending >= 0)
) WITH (fillfactor = 50);

-- Inserts the edges job_ids[i] waits for dep_ids[i] (on_failure[i]) and, for each dependent
-- given 32 edges or more, its stripes: its edges in dep_id order are dealt round robin into
-- least(128, n / 8) stripes (at least 8 edges a stripe, so that only a stripe's last finish
-- takes the join's lock; at most 128, more than the tasks in flight at once: consecutive ids
-- land in different stripes). Called with all the edges of each dependent (InsertDeps: a
-- workflow's edges in one call; a sequence job has one edge and no stripe).
CREATE FUNCTION tenure.insert_deps(dep_ids bigint[], job_ids bigint[], on_failure text[]) RETURNS void
    LANGUAGE sql VOLATILE
AS $$
    WITH e AS (
        SELECT u.dep_id, u.job_id, u.on_failure,
               count(*) OVER w AS n, row_number() OVER (w ORDER BY u.dep_id) - 1 AS rank
        FROM unnest(dep_ids, job_ids, on_failure) AS u(dep_id, job_id, on_failure)
        WINDOW w AS (PARTITION BY u.job_id)
    ), s AS (
        SELECT e.dep_id, e.job_id, e.on_failure,
               CASE WHEN e.n >= 32 THEN (e.rank % least(128, e.n / 8))::smallint END AS stripe
        FROM e
    ), edges AS (
        INSERT INTO tenure.job_deps (dep_id, job_id, on_failure, stripe)
        SELECT s.dep_id, s.job_id, s.on_failure, s.stripe FROM s
    )
    INSERT INTO tenure.job_dep_stripes (job_id, stripe, pending)
    SELECT s.job_id, s.stripe, count(*) FROM s WHERE s.stripe IS NOT NULL GROUP BY s.job_id, s.stripe
$$;

-- settle_jobs (0026) with striped dependents. Per round:
-- 1. one statement resolves the edges out of the jobs and settles the dependents that are not
--    striped on their rows as 0026 did (decrement, release, cancel; EvalPlanQual under the row
--    lock); it returns the striped edges' counts per stripe and the striped dependents;
-- 1b. only if there are striped edges, one statement locks their stripes (in (job_id, stripe)
--    order) and decrements them (a workload without large fan-ins never reads
--    tenure.job_dep_stripes, nor needs privileges on it); the striped dependents to settle are
--    those a stripe of which it brought to 0, and those an edge of which failed under 'cancel';
-- 2. if there are any, one statement locks their rows (FOR NO KEY UPDATE, the lock an UPDATE
--    takes, in id order), and
-- 3. the next (its snapshot taken after the locks were granted) cancels them, or releases each
--    still waiting whose stripes are all 0, deleting its stripes.
-- Step 1 never locks a striped dependent's row and steps 2-3 lock only those, so one round
-- takes the jobs' row locks in two ordered sets. Cancelled dependents with dependents of their
-- own feed the next round (a cascade, as before). A striped dependent cancelled keeps its
-- stripes (deleted with the job): another finish may be decrementing them.
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
        ), ended AS (
            -- the done signal (CompleteMany's payload: ids, 350 a message) for the dependents
            -- this round cancelled: they reached a final state (jobs.Client.Wait)
            SELECT count(pg_notify('tenure_done', e.ids)) AS n
            FROM (SELECT string_agg(x.id::text, ',') AS ids
                  FROM (SELECT c.id, row_number() OVER () AS rn FROM changed c WHERE c.state = 'cancelled') x
                  GROUP BY (x.rn - 1) / 350) e
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
            ), ended AS (
                SELECT count(pg_notify('tenure_done', e.ids)) AS n
                FROM (SELECT string_agg(x.id::text, ',') AS ids
                      FROM (SELECT c.id, row_number() OVER () AS rn FROM changed c WHERE c.state = 'cancelled') x
                      GROUP BY (x.rn - 1) / 350) e
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

-- Roles: an enqueuer writes stripes with the edges (tenure.insert_deps); a worker's and an
-- operator's transitions fire the trigger, which decrements and deletes them; pruning and
-- Delete remove those of a job deleted; readers see them. (worker.Start's privilege check has
-- to learn the new table: see bench/results/2026-12-04-join.md.)
-- Existing roles: run the grant functions again (without them an enqueuer cannot insert, and a
-- worker or an operator cannot finish or cancel, a job of a dependent of 32 dependencies or more).
CREATE OR REPLACE FUNCTION tenure.grant_reader(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT', 'effects:SELECT', 'audit:SELECT', 'workers:SELECT', 'periodic:SELECT',
        'queues:SELECT', 'flow:SELECT', 'flow_grant:SELECT', 'flow_permit:SELECT', 'outbox:SELECT',
        'stream_effects:SELECT', 'schema_migrations:SELECT', 'kinds:SELECT', 'job_deps:SELECT',
        'sequences:SELECT', 'job_dep_stripes:SELECT'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE (has_dependents)', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT',
        'kinds:SELECT', 'job_deps:SELECT, INSERT', 'sequences:SELECT, INSERT, UPDATE',
        'job_dep_stripes:SELECT, INSERT'])
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
        'sequences:SELECT, UPDATE, DELETE', 'job_dep_stripes:SELECT, UPDATE, DELETE'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_operator(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_reader(role)
    UNION ALL
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:UPDATE, DELETE', 'effects:DELETE', 'audit:INSERT', 'queues:INSERT, UPDATE',
        'job_deps:UPDATE, DELETE', 'job_dep_stripes:UPDATE, DELETE'])
$$;
