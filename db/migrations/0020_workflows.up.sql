-- Workflows and sequences (issue 30): jobs that wait for other jobs.
-- A job that waits is in state 'waiting': never in jobs_ready_idx, never claimed. Its edges
-- (tenure.job_deps: dependency -> dependent, with what to do when the dependency fails) are
-- written with it; deps_pending counts its unresolved edges. A job with dependents carries
-- has_dependents, and only such a job's move to a final state fires the trigger
-- jobs_settle_dependents: it runs inside the statement that made the move (a fenced finish,
-- the lease-expiry sweep, an operator cancel, CompleteTx in the application's transaction),
-- so a dependent is released (waiting -> ready) or cancelled in the very transaction that
-- finished its last dependency, and never otherwise. A job without dependents pays for the
-- trigger's WHEN condition only (a false boolean column, evaluated per updated row).
ALTER TYPE tenure.job_state ADD VALUE IF NOT EXISTS 'waiting';

-- The name of a workflow's task (jobs.Workflow.Add), unique within its workflow; a sequence key
-- (jobs.InsertOpts.Sequence), 1..200 bytes; a count of unresolved dependencies. Their
-- constraints are added NOT VALID after the columns (migration 0020): a column of a domain with
-- constraints would make ADD COLUMN rewrite tenure.jobs, and every existing row holds NULL or 0.
CREATE DOMAIN tenure.task_name AS text;
CREATE DOMAIN tenure.sequence_key AS text;
CREATE DOMAIN tenure.dep_count AS integer;

ALTER TABLE tenure.jobs
    -- the workflow the job is a task of (jobs.Client.InsertWorkflowTx), and its task name
    ADD COLUMN workflow_id    uuid,
    ADD COLUMN task_name      tenure.task_name,
    -- the sequence the job runs in (jobs.InsertOpts.Sequence)
    ADD COLUMN sequence_key   tenure.sequence_key,
    -- (these columns stay NULL on a job of neither kind: no byte of the row, where an int and a
    -- bool with defaults would make every row 8 bytes wider)
    -- unresolved dependencies of a waiting job: it becomes ready when this reaches 0
    ADD COLUMN deps_pending   tenure.dep_count,
    -- some job depends on this one: its final state settles tenure.job_deps (the trigger)
    ADD COLUMN has_dependents boolean;
ALTER DOMAIN tenure.task_name ADD CONSTRAINT jobs_task_name_len
    CHECK (char_length(VALUE) BETWEEN 1 AND 200) NOT VALID;
ALTER DOMAIN tenure.sequence_key ADD CONSTRAINT jobs_sequence_key_len
    CHECK (octet_length(VALUE) BETWEEN 1 AND 200) NOT VALID;
ALTER DOMAIN tenure.dep_count ADD CONSTRAINT jobs_deps_pending_pos CHECK (VALUE >= 0) NOT VALID;

-- The edges: job_id waits for dep_id. on_failure says what a dead or cancelled dependency does
-- to the dependent: 'cancel' it (the workflow default), 'run' it anyway, or 'block' (it keeps
-- waiting until the dependency succeeds after an operator's retry: the sequence default).
-- resolved: the edge has been counted (a dependency that succeeded, or failed under 'cancel' or
-- 'run'); an edge is resolved at most once, so a dependency retried by an operator after it was
-- counted is not counted again.
CREATE TABLE tenure.job_deps (
    dep_id     bigint  NOT NULL,
    job_id     bigint  NOT NULL,
    on_failure text    NOT NULL DEFAULT 'cancel',
    resolved   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (dep_id, job_id),

    CONSTRAINT job_deps_on_failure CHECK (on_failure IN ('cancel', 'run', 'block')),
    CONSTRAINT job_deps_not_self   CHECK (dep_id <> job_id)
);
-- A task's dependencies (worker.DependencyOutput, the views).
CREATE INDEX job_deps_job_idx ON tenure.job_deps (job_id);

-- The last job inserted in each sequence. Inserting into a sequence locks the key's row
-- (tenure.sequence_prev), so the inserts of one key are ordered, and each new job waits on the
-- one before it.
CREATE TABLE tenure.sequences (
    key         text        PRIMARY KEY,
    last_job_id bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A workflow's tasks by name; rows of no workflow never enter it.
CREATE UNIQUE INDEX jobs_workflow_idx ON tenure.jobs (workflow_id, task_name) WHERE workflow_id IS NOT NULL;
-- A sequence's jobs in order; rows of no sequence never enter it.
CREATE INDEX jobs_sequence_idx ON tenure.jobs (sequence_key, id) WHERE sequence_key IS NOT NULL;

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

-- The job a new job of sequence seq_key must wait for, or 0: locks the key's row in
-- tenure.sequences (created on first use; a concurrent insert of the same key waits for this
-- transaction), reads the key's last job, and returns it if it may still run or (on_failure =
-- 'block') ended dead or cancelled. Every sequence job is inserted with has_dependents, so the
-- trigger settles its successor. The last job's row is locked until this transaction ends, so
-- that its move to a final state either committed before (it is then not waited for) or comes
-- after the new edge is committed (its trigger then releases the new job):
--   FOR KEY SHARE first, whatever its state: a claim (FOR UPDATE SKIP LOCKED) skips the row, an
--   operator's cancel (LockJob, FOR UPDATE) waits, but the release of a waiting last job by its
--   own predecessor's finish (an UPDATE, FOR NO KEY UPDATE) does not wait: an open inserting
--   transaction never holds up a finish statement;
--   FOR SHARE then, if it is ready or running: its finish (the engine's batched writes lock with
--   FOR UPDATE SKIP LOCKED and wait for this row alone; CompleteTx's UPDATE) waits, or committed
--   first and the state read here is its final one.
-- The caller inserts the job, the edge and sets the key's last job (SequenceSetLast) in the
-- same transaction.
CREATE FUNCTION tenure.sequence_prev(seq_key text, on_failure text) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    prev bigint;
    st   text;
BEGIN
    INSERT INTO tenure.sequences AS s (key) VALUES (seq_key) ON CONFLICT (key) DO NOTHING;
    SELECT s.last_job_id INTO prev FROM tenure.sequences s WHERE s.key = seq_key FOR UPDATE;
    IF coalesce(prev, 0) = 0 THEN
        RETURN 0;
    END IF;
    SELECT j.state::text INTO st FROM tenure.jobs j WHERE j.id = prev FOR KEY SHARE;
    IF st IN ('ready', 'running') THEN
        SELECT j.state::text INTO st FROM tenure.jobs j WHERE j.id = prev FOR SHARE;
    END IF;
    IF st IN ('ready', 'running', 'waiting')
       OR (st IN ('dead', 'cancelled') AND sequence_prev.on_failure = 'block') THEN
        RETURN prev;
    END IF;
    RETURN 0; -- succeeded, skipped past, or pruned
END
$$;

-- The grant functions of 0018 cover the new tables: an enqueuer writes edges and sequence
-- rows and locks a sequence's last job (FOR KEY SHARE / FOR SHARE need UPDATE on a column: it
-- gets has_dependents); a worker's and an operator's transitions fire the trigger, which
-- resolves edges.
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

CREATE OR REPLACE FUNCTION tenure.grant_worker(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE, DELETE', 'effects:SELECT, INSERT, UPDATE, DELETE',
        'workers:SELECT, INSERT, UPDATE, DELETE', 'periodic:SELECT, INSERT, UPDATE', 'queues:SELECT',
        'flow:SELECT, INSERT, UPDATE, DELETE', 'flow_grant:SELECT, INSERT, UPDATE',
        'flow_permit:SELECT, INSERT, UPDATE, DELETE', 'outbox:SELECT, INSERT, UPDATE, DELETE',
        'stream_effects:SELECT, INSERT, UPDATE, DELETE', 'schema_migrations:SELECT',
        'kinds:SELECT, INSERT, UPDATE, DELETE', 'job_deps:SELECT, UPDATE, DELETE'])
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
