-- Tenure schema: the full current schema, the one sqlc reads.
-- Migrations in db/migrations/ must produce exactly this (a test compares the catalogs).
-- Every object lives in the dedicated schema "tenure" so it never collides with the app's tables.

CREATE SCHEMA IF NOT EXISTS tenure;

-- Job lifecycle. cancel-requested is not a state: it is running + cancel_requested_at,
-- so every fenced transition keeps the single condition state = 'running'.
-- 'waiting' (migration 0020): a workflow task or sequence job whose dependencies have not all
-- resolved; never claimed, never in jobs_ready_idx (tenure.settle_dependents releases it).
CREATE TYPE tenure.job_state AS ENUM ('ready', 'running', 'succeeded', 'dead', 'cancelled', 'waiting');

-- Which states hold a job's unique key: a bitmask over tenure.job_state (ready 1, running 2,
-- succeeded 4, dead 8, cancelled 16). IMMUTABLE, so the partial unique index can use it.
CREATE FUNCTION tenure.unique_state_held(states smallint, st tenure.job_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (states & CASE st WHEN 'ready' THEN 1 WHEN 'running' THEN 2 WHEN 'succeeded' THEN 4
                             WHEN 'dead' THEN 8 ELSE 16 END) <> 0
$$;

-- A job's unique key: sha256 of a JSON array [kind, queue or null, args or null, period
-- window or null]. The window is the number of whole periods since the Unix epoch on the
-- database clock (now(): the inserting transaction's start). by_args with an empty fields
-- array takes the whole payload; with names, only those top-level fields (a missing field is
-- left out). jobs.InsertOpts.Unique and tenure.enqueue both compute keys here, so the same
-- options give the same key from Go and from SQL.
CREATE FUNCTION tenure.unique_key(kind text, queue text, payload jsonb, by_args boolean, fields text[], period_ms bigint)
    RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT sha256(convert_to(jsonb_build_array(
        kind,
        queue,
        CASE WHEN by_args THEN
            CASE WHEN coalesce(cardinality(fields), 0) = 0 THEN payload
                 ELSE (SELECT coalesce(jsonb_object_agg(f, payload -> f), '{}'::jsonb)
                       FROM unnest(fields) AS f WHERE payload ? f) END
        END,
        CASE WHEN period_ms > 0 THEN floor(extract(epoch FROM now()) * 1000 / period_ms)::bigint END
    )::text, 'UTF8'))
$$;

-- The limits on what a job carries (migration 0016): the same numbers as generics/limits.go,
-- checked equal by TestLimitsMatchTheDatabase. JSON sizes are bytes of jsonb text
-- (tenure.json_size; generics.JSONSize computes the same in Go), names are characters.
CREATE FUNCTION tenure.limit(name text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE name
        WHEN 'args'              THEN 65536
        WHEN 'output'            THEN 16384
        WHEN 'effect_result'     THEN 65536
        WHEN 'metadata'          THEN 4096
        WHEN 'metadata_entries'  THEN 64
        WHEN 'metadata_key'      THEN 128
        WHEN 'tags'              THEN 16
        WHEN 'tag'               THEN 64
        WHEN 'kind'              THEN 128
        WHEN 'queue'             THEN 128
        WHEN 'error_message'     THEN 2000
        WHEN 'error_history'     THEN 10
        WHEN 'name'              THEN 200
        WHEN 'reason'            THEN 2000
    END
$$;
COMMENT ON FUNCTION tenure.limit(text) IS
    'The limits Tenure puts on what a job carries; the same numbers as generics/limits.go (JSON sizes in bytes of jsonb text, names in characters).';

CREATE FUNCTION tenure.json_size(v jsonb) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT octet_length(v::text) $$;
COMMENT ON FUNCTION tenure.json_size(jsonb) IS
    'The measure of every JSON limit: bytes of the value''s jsonb text (generics.JSONSize in Go).';

-- Single-column rules are domains, not table CHECKs (migration 0014). PostgreSQL checks a
-- domain only where a value is assigned to the column (an INSERT, or an UPDATE that sets it),
-- while it re-reads, plans and evaluates every CHECK constraint of a table on every INSERT and
-- UPDATE of a row: the engine's claim and finish updates set only a few of these columns (the
-- claim lease_ms and generation, a completion output, a failure errors and last_error_code),
-- each a check of one value, and with 24 table CHECKs each one-row statement paid about 60 us
-- for them (issue 17, "low load").
-- What relates several columns (the state machine's invariants) stays a table CHECK below.
-- The constraint names are the ones the table CHECKs had, so errors read as before.
CREATE DOMAIN tenure.queue_name AS text
    CONSTRAINT jobs_queue_len CHECK (char_length(VALUE) BETWEEN 1 AND 128);
CREATE DOMAIN tenure.kind_name AS text
    CONSTRAINT jobs_kind_len CHECK (char_length(VALUE) BETWEEN 1 AND 128);
CREATE DOMAIN tenure.job_payload AS jsonb
    CONSTRAINT jobs_payload_object CHECK (jsonb_typeof(VALUE) = 'object');
CREATE DOMAIN tenure.payload_version AS integer
    CONSTRAINT jobs_version_pos CHECK (VALUE >= 1);
CREATE DOMAIN tenure.job_priority AS smallint
    CONSTRAINT jobs_priority_range CHECK (VALUE BETWEEN 1 AND 9);
CREATE DOMAIN tenure.max_attempts AS integer
    CONSTRAINT jobs_max_attempts CHECK (VALUE BETWEEN 1 AND 1000);
CREATE DOMAIN tenure.lease_ms AS integer
    CONSTRAINT jobs_lease_range CHECK (VALUE BETWEEN 1000 AND 86400000);
CREATE DOMAIN tenure.job_generation AS bigint
    CONSTRAINT jobs_generation_pos CHECK (VALUE >= 0);
CREATE DOMAIN tenure.error_list AS jsonb
    CONSTRAINT jobs_errors_array CHECK (jsonb_typeof(VALUE) = 'array');
-- error codes are a bounded vocabulary of upper-case words (messages live in errors)
CREATE DOMAIN tenure.error_code AS text
    CONSTRAINT jobs_error_code CHECK (VALUE ~ '^[A-Z][A-Z_]{0,39}$');
-- metadata is an object of strings, bounded (jobs.InsertOpts.Metadata validates first)
CREATE DOMAIN tenure.job_metadata AS jsonb
    CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(VALUE) = 'object'
        AND NOT jsonb_path_exists(VALUE, '$.* ? (@.type() != "string")'));
    -- and jobs_metadata_size, added below with the job_output size check
CREATE DOMAIN tenure.unique_key_hash AS bytea
    CONSTRAINT jobs_unique_key_len CHECK (octet_length(VALUE) = 32);
-- ready and running always hold the key, so no engine transition can collide
CREATE DOMAIN tenure.unique_state_set AS smallint
    CONSTRAINT jobs_unique_states CHECK (VALUE BETWEEN 3 AND 31 AND (VALUE & 3) = 3);
CREATE DOMAIN tenure.tag_list AS text[]
    CONSTRAINT jobs_tags_valid CHECK (cardinality(VALUE) <= 16 AND coalesce(array_ndims(VALUE), 1) = 1
        AND array_position(VALUE, NULL) IS NULL
        AND (cardinality(VALUE) = 0 OR (E'\n' || array_to_string(VALUE, E'\n')) ~ '^(\n[A-Za-z0-9][A-Za-z0-9_.:/=+-]{0,63})+$'));
CREATE DOMAIN tenure.job_output AS jsonb;
-- Sizes are checked on every write since migration 0016 (rows written before it are not re-read).
ALTER DOMAIN tenure.job_output ADD CONSTRAINT jobs_output_size
    CHECK (tenure.json_size(VALUE) <= tenure.limit('output')) NOT VALID;
ALTER DOMAIN tenure.job_metadata ADD CONSTRAINT jobs_metadata_size
    CHECK (VALUE = '{}' OR tenure.json_size(VALUE) <= tenure.limit('metadata')) NOT VALID;
-- Every time of a job lies in [1970-01-01, 2200-01-01) UTC (migration 0016), so that every
-- reader can hold it in a time.Time and subtract any two without overflow
-- (generics.MinJobTime, MaxJobTime).
CREATE DOMAIN tenure.job_time AS timestamptz
    CONSTRAINT jobs_time_range CHECK (VALUE >= '1970-01-01 00:00:00+00' AND VALUE < '2200-01-01 00:00:00+00');
CREATE DOMAIN tenure.snooze_count AS integer
    CONSTRAINT jobs_snoozes_pos CHECK (VALUE >= 0);
-- The name of a workflow's task (jobs.Workflow.Add), unique within its workflow; a sequence key
-- (jobs.InsertOpts.Sequence), 1..200 bytes; a count of unresolved dependencies. Their
-- constraints are added NOT VALID after the columns (migration 0020): a column of a domain with
-- constraints would make ADD COLUMN rewrite tenure.jobs, and every existing row holds NULL or 0.
CREATE DOMAIN tenure.task_name AS text;
CREATE DOMAIN tenure.sequence_key AS text;
CREATE DOMAIN tenure.dep_count AS integer;

CREATE TABLE tenure.jobs (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue               tenure.queue_name NOT NULL DEFAULT 'default',
    kind                tenure.kind_name NOT NULL,
    payload             tenure.job_payload NOT NULL,
    payload_version     tenure.payload_version NOT NULL DEFAULT 1,
    state               tenure.job_state NOT NULL DEFAULT 'ready',
    priority            tenure.job_priority NOT NULL DEFAULT 2,
    run_at              tenure.job_time   NOT NULL DEFAULT now(),
    attempts            integer          NOT NULL DEFAULT 0,
    max_attempts        tenure.max_attempts NOT NULL DEFAULT 25,
    lease_ms            tenure.lease_ms  NOT NULL DEFAULT 30000,
    locked_by           text,
    locked_until        tenure.job_time,
    claim_token         uuid,
    generation          tenure.job_generation NOT NULL DEFAULT 0,
    attempted_at        tenure.job_time,
    last_error_code     tenure.error_code,
    errors              tenure.error_list NOT NULL DEFAULT '[]',
    created_at          tenure.job_time   NOT NULL DEFAULT now(),
    updated_at          tenure.job_time   NOT NULL DEFAULT now(),
    finished_at         tenure.job_time,
    cancel_requested_at tenure.job_time,
    -- string key/value pairs from the enqueuer for the handler (trace context, request ids)
    metadata            tenure.job_metadata NOT NULL DEFAULT '{}',
    -- unique jobs (jobs.InsertOpts.Unique): the key and the states that hold it (both set or both null)
    unique_key          tenure.unique_key_hash,
    unique_states       tenure.unique_state_set,
    -- short labels set at insert, searchable through jobs_tags_idx
    tags                tenure.tag_list  NOT NULL DEFAULT '{}',
    -- what the handler recorded (worker.SetOutput), written by the fenced completion
    output              tenure.job_output,
    -- how often the job snoozed (worker.Snooze): a snooze does not consume an attempt
    snoozes             tenure.snooze_count NOT NULL DEFAULT 0,
    -- claimed by a limited claim as a kind a concurrency limit covers (migration 0010): only
    -- such running rows enter jobs_limited_idx
    limited             boolean          NOT NULL DEFAULT false,
    -- workflows and sequences (migration 0020): the workflow the job is a task of
    -- (jobs.Client.InsertWorkflowTx) and its task name; the sequence it runs in
    -- (jobs.InsertOpts.Sequence); unresolved dependencies of a waiting job (it becomes ready at
    -- 0); has_dependents: some job depends on this one, so its final state settles
    -- tenure.job_deps (the trigger jobs_settle_dependents). All NULL on a job of neither kind:
    -- a NULL costs a row no byte here (the null bitmap has room), where an int and a bool with
    -- defaults would make every row 8 bytes wider
    workflow_id         uuid,
    task_name           tenure.task_name,
    sequence_key        tenure.sequence_key,
    deps_pending        tenure.dep_count,
    has_dependents      boolean,
    -- the running attempt's progress (worker.Progress: done, total, msg, at), written with its
    -- heartbeats and finish (migration 0021); a retry clears it, the attempt's error entry keeps it
    progress            jsonb,

    CONSTRAINT jobs_attempts_range CHECK (attempts >= 0 AND attempts <= max_attempts),
    -- a running job is owned: it has a token, an owner and a lease
    CONSTRAINT jobs_running_owned  CHECK (state <> 'running'
        OR (claim_token IS NOT NULL AND locked_until IS NOT NULL AND locked_by IS NOT NULL AND attempted_at IS NOT NULL)),
    -- a job that is not running has no lease and no owner
    CONSTRAINT jobs_idle_unowned   CHECK (state = 'running'
        OR (locked_until IS NULL AND locked_by IS NULL)),
    -- a ready job carries no token: the next claim mints one
    CONSTRAINT jobs_ready_no_token CHECK (state <> 'ready' OR claim_token IS NULL),
    -- final states carry their finish time; live ones do not
    CONSTRAINT jobs_finished_at    CHECK ((state IN ('succeeded', 'dead', 'cancelled')) = (finished_at IS NOT NULL)),
    -- a cancel request only exists on a job that was running when it was asked
    CONSTRAINT jobs_cancel_request CHECK (cancel_requested_at IS NULL OR state <> 'ready'),
    CONSTRAINT jobs_unique_pair    CHECK ((unique_key IS NULL) = (unique_states IS NULL))
)
-- A queue table churns: every job leaves two or three dead row versions (claim and finish
-- change state, which partial indexes read, so no update is HOT). Autovacuum's defaults are
-- for ordinary tables (vacuum at 20 % dead rows, throttled to cost 200 per 2 ms), and on a busy
-- queue one throttled vacuum of the table and its indexes took ~110 s while dead rows piled up
-- to 5 M (migration 0015 says how this was measured). Vacuum at 1 % and 10x the cost budget.
-- Inserts fill each page half (fillfactor, migration 0027): the claim's and the finish's new
-- row versions land on the page of the row they replace, which logs only the changed middle
-- of the row and needs no second page (measured: 28 % less WAL per job in steady).
WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_limit = 2000, fillfactor = 50);

-- The claim index: only ready rows, in the order every fairness policy reads them
-- (per queue, per priority band, oldest first). Finished rows never enter it. kind is carried
-- (not a key) so the cluster metrics count ready jobs per queue, kind and priority from the
-- index alone (an index-only scan, migration 0007).
CREATE INDEX jobs_ready_idx ON tenure.jobs (queue, priority DESC, run_at, id) INCLUDE (kind) WHERE state = 'ready';

-- The lease-expiry sweep reads only leased rows (exactly the running ones, by the CHECKs
-- above), soonest expiry first. The predicate is on locked_until, not on state, on purpose: the
-- fenced batch writes (WHERE id = ... AND state = 'running' AND claim_token = ...) must reach
-- their rows through the primary key, and a partial index on state = 'running' tempts the
-- planner, whenever statistics were taken while nothing ran, into walking every running row
-- for each batch.
CREATE INDEX jobs_running_idx ON tenure.jobs (locked_until) WHERE locked_until IS NOT NULL;

-- Flow control (migration 0010): the limited claim counts running, leased jobs per limit group
-- (queue, kind, concurrency key = metadata "tenure.concurrency_key"). Only rows a limited claim
-- marked enter it, so unlimited kinds maintain no entry; the predicate is on locked_until (like
-- jobs_running_idx) so it never tempts the planner for the fenced writes.
CREATE INDEX jobs_limited_idx ON tenure.jobs (queue, kind, (metadata ->> 'tenure.concurrency_key'))
    WHERE locked_until IS NOT NULL AND limited;

-- Fair share (migration 0012): the fair claim finds a band's tenants (metadata
-- "tenure.fair_key") by a skip scan and reads each tenant's oldest ready jobs. Only keyed ready
-- rows enter it.
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

-- Retention pruning and finished-job stats read final rows by finish time.
CREATE INDEX jobs_finished_idx ON tenure.jobs (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled');

-- Operators search dead jobs by queue and kind. priority and last_error_code are carried so
-- the cluster metrics count dead jobs per code from the index alone (migration 0007).
CREATE INDEX jobs_dead_idx ON tenure.jobs (queue, kind, id) INCLUDE (priority, last_error_code) WHERE state = 'dead';

-- At most one job per unique key among the jobs whose state holds it. INSERT ... ON CONFLICT
-- names this predicate exactly. A job leaving its unique states (finished, dead, cancelled)
-- leaves the index and frees the key; the key stays in its row for operators to read.
CREATE UNIQUE INDEX jobs_unique_idx ON tenure.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND tenure.unique_state_held(unique_states, state);

-- Search by tag (jobs.ListParams.Tags: every listed tag present). Partial: untagged jobs
-- (most) never enter it, so their claims and finishes (non-HOT updates) add no GIN entries.
CREATE INDEX jobs_tags_idx ON tenure.jobs USING gin (tags) WHERE tags <> '{}';

-- The effect ledger (docs/contract.md §7): one row per (job, effect name), keyed by the stable
-- idempotency key job:{id}:effect:{name}. generation records which attempt produced the result;
-- a stale generation can never overwrite a newer one.
CREATE TABLE tenure.effects (
    key         text        PRIMARY KEY,
    job_id      bigint      NOT NULL,
    name        text        NOT NULL,
    generation  bigint      NOT NULL,
    result      jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT effects_name_len    CHECK (char_length(name) BETWEEN 1 AND 200),
    -- set when the effect ran but its result could not be recorded (worker.Effect): result
    -- is then JSON null, and the effect is never run again (migration 0016)
    refused     text,

    CONSTRAINT effects_job_name    UNIQUE (job_id, name),
    CONSTRAINT effects_refused     CHECK (refused IS NULL OR (result = 'null' AND char_length(refused) BETWEEN 1 AND 2000))
);
ALTER TABLE tenure.effects ADD CONSTRAINT effects_result_size
    CHECK (tenure.json_size(result) <= tenure.limit('effect_result')) NOT VALID;

-- Operator actions (re-inject, cancel, purge, retry, delete): who, when, why, what.
CREATE TABLE tenure.audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    action      text        NOT NULL,
    reason      text        NOT NULL,
    job_id      bigint,
    detail      jsonb       NOT NULL DEFAULT '{}',

    CONSTRAINT audit_actor_len  CHECK (char_length(actor) BETWEEN 1 AND 200),
    CONSTRAINT audit_reason_len CHECK (char_length(reason) BETWEEN 1 AND 2000),
    CONSTRAINT audit_action     CHECK (action IN ('reinject', 'cancel', 'purge', 'prune', 'retry', 'delete', 'pause', 'resume'))
);

CREATE INDEX audit_job_idx ON tenure.audit (job_id, id);

-- The worker registry (SPEC section 9: per-worker heartbeat age, last success, throughput).
-- One row per running worker process, upserted by its registry service every interval,
-- deleted when it stops gracefully, and aged out by the other workers once expires_at passed
-- (a killed process leaves its row behind until then).
CREATE TABLE tenure.workers (
    id              text        PRIMARY KEY,
    host            text        NOT NULL,
    pid             integer     NOT NULL,
    version         text        NOT NULL,
    queues          jsonb       NOT NULL DEFAULT '{}',
    started_at      timestamptz NOT NULL,
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    last_success_at timestamptz,
    counters        jsonb       NOT NULL DEFAULT '{}',

    CONSTRAINT workers_id_len         CHECK (char_length(id) BETWEEN 1 AND 200),
    CONSTRAINT workers_host_len       CHECK (char_length(host) <= 255),
    CONSTRAINT workers_version_len    CHECK (char_length(version) <= 100),
    CONSTRAINT workers_queues_object  CHECK (jsonb_typeof(queues) = 'object'),
    CONSTRAINT workers_counters_object CHECK (jsonb_typeof(counters) = 'object'),
    CONSTRAINT workers_expiry_after   CHECK (expires_at > heartbeat_at)
);

-- Enqueue from SQL (triggers, migrations, other languages). It applies the checks the database
-- can make (the CHECK constraints above plus clear errors for the common mistakes), computes
-- unique keys like the Go client, and sends the same new-job NOTIFY as the Go insert (inside
-- the calling transaction, delivered on commit) when the job is due now. It does not run the
-- args type's Go-side Validate, and payload_version is whatever the caller passes (default 1):
-- the handler's decode (version check, upgraders, strict decoding, Validate) still guards
-- every job it runs. The job is unique when any unique_* argument is given: unique_args NULL
-- leaves the args out of the key, '{}' takes the whole payload, names take those fields;
-- unique_states adds succeeded/dead/cancelled to the states that always hold a key (ready,
-- running). Returns the job's id and whether it was a duplicate (the existing job's id).
-- queue, priority, max_attempts and lease_ms default to NULL, meaning "the kind's published
-- defaults" (tenure.kinds, migration 0018), then 'default', 2, 25, 30000. Limits and the
-- job-time window are migration 0016's. sequence (migration 0023) puts the job in a sequence
-- as InsertOpts.Sequence does (sequence_on_failure 'block', the default, or 'skip'); not with
-- the unique_* arguments.
CREATE FUNCTION tenure.enqueue(
    kind            text,
    payload         jsonb,
    queue           text                DEFAULT NULL,
    priority        integer             DEFAULT NULL,
    run_at          timestamptz         DEFAULT NULL,
    max_attempts    integer             DEFAULT NULL,
    metadata        jsonb               DEFAULT '{}',
    tags            text[]              DEFAULT '{}',
    payload_version integer             DEFAULT 1,
    lease_ms        integer             DEFAULT NULL,
    unique_args     text[]              DEFAULT NULL,
    unique_by_queue boolean             DEFAULT false,
    unique_period   interval            DEFAULT NULL,
    unique_states   tenure.job_state[]  DEFAULT NULL,
    sequence        text                DEFAULT NULL,
    sequence_on_failure text            DEFAULT 'block'
) RETURNS TABLE (id bigint, duplicate boolean)
    LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_key    bytea;
    v_states smallint;
    v_id     bigint;
    v_tries  integer := 0;
    v_def    record;
    v_prev   bigint := 0;
    v_edge   text;
BEGIN
    -- Arguments left NULL take the kind's published defaults (tenure.kinds, the latest
    -- published: publishing deletes the kind's rows of workers no longer live), then the
    -- library's. Only tenure.kinds is read, so grant_enqueuer needs nothing more.
    IF enqueue.queue IS NULL OR enqueue.priority IS NULL OR enqueue.max_attempts IS NULL OR enqueue.lease_ms IS NULL THEN
        SELECT k.queue, k.priority, k.max_attempts, k.lease_ms INTO v_def
        FROM tenure.kinds k
        WHERE k.kind = enqueue.kind
        ORDER BY k.published_at DESC, k.worker_id
        LIMIT 1;
        enqueue.queue        := coalesce(enqueue.queue, v_def.queue, 'default');
        enqueue.priority     := coalesce(enqueue.priority, v_def.priority, 2);
        enqueue.max_attempts := coalesce(enqueue.max_attempts, v_def.max_attempts, 25);
        enqueue.lease_ms     := coalesce(enqueue.lease_ms, v_def.lease_ms, 30000);
    END IF;
    IF enqueue.kind IS NULL OR char_length(enqueue.kind) NOT BETWEEN 1 AND tenure.limit('kind') THEN
        RAISE EXCEPTION 'tenure.enqueue: kind must be 1..% characters', tenure.limit('kind') USING ERRCODE = '22023';
    END IF;
    IF enqueue.payload IS NULL OR jsonb_typeof(enqueue.payload) <> 'object' THEN
        RAISE EXCEPTION 'tenure.enqueue: payload must be a JSON object' USING ERRCODE = '22023';
    END IF;
    IF tenure.json_size(enqueue.payload) > tenure.limit('args') THEN
        RAISE EXCEPTION 'tenure.enqueue: payload is % bytes as jsonb text, at most % allowed',
            tenure.json_size(enqueue.payload), tenure.limit('args') USING ERRCODE = '22023';
    END IF;
    IF enqueue.run_at IS NOT NULL
       AND NOT (enqueue.run_at >= '1970-01-01 00:00:00+00' AND enqueue.run_at < '2200-01-01 00:00:00+00') THEN
        RAISE EXCEPTION 'tenure.enqueue: run_at % is outside 1970-01-01 .. 2200-01-01 UTC', enqueue.run_at
            USING ERRCODE = '22023';
    END IF;
    IF enqueue.metadata IS NOT NULL AND enqueue.metadata <> '{}' THEN
        IF jsonb_typeof(enqueue.metadata) <> 'object'
           OR jsonb_path_exists(enqueue.metadata, '$.* ? (@.type() != "string")') THEN
            RAISE EXCEPTION 'tenure.enqueue: metadata must be an object of strings' USING ERRCODE = '22023';
        END IF;
        IF (SELECT count(*) FROM jsonb_object_keys(enqueue.metadata)) > tenure.limit('metadata_entries')
           OR EXISTS (SELECT 1 FROM jsonb_object_keys(enqueue.metadata) k
                      WHERE octet_length(k) NOT BETWEEN 1 AND tenure.limit('metadata_key')) THEN
            RAISE EXCEPTION 'tenure.enqueue: metadata has more than % entries or a key outside 1..% bytes',
                tenure.limit('metadata_entries'), tenure.limit('metadata_key') USING ERRCODE = '22023';
        END IF;
        IF tenure.json_size(enqueue.metadata) > tenure.limit('metadata') THEN
            RAISE EXCEPTION 'tenure.enqueue: metadata is % bytes as jsonb text, at most % allowed',
                tenure.json_size(enqueue.metadata), tenure.limit('metadata') USING ERRCODE = '22023';
        END IF;
    END IF;
    IF enqueue.queue IS NULL OR enqueue.queue !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' THEN
        RAISE EXCEPTION 'tenure.enqueue: % is not a valid queue name', coalesce(quote_literal(enqueue.queue), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF enqueue.priority IS NULL OR enqueue.priority NOT BETWEEN 1 AND 9 THEN
        RAISE EXCEPTION 'tenure.enqueue: priority % is outside 1..9', enqueue.priority USING ERRCODE = '22023';
    END IF;
    IF enqueue.max_attempts IS NULL OR enqueue.max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'tenure.enqueue: max_attempts % is outside 1..1000', enqueue.max_attempts USING ERRCODE = '22023';
    END IF;
    IF enqueue.payload_version IS NULL OR enqueue.payload_version < 1 THEN
        RAISE EXCEPTION 'tenure.enqueue: payload_version must be >= 1' USING ERRCODE = '22023';
    END IF;
    IF enqueue.unique_period IS NOT NULL AND enqueue.unique_period < interval '1 second' THEN
        RAISE EXCEPTION 'tenure.enqueue: unique_period must be at least 1 second' USING ERRCODE = '22023';
    END IF;
    IF enqueue.unique_args IS NOT NULL OR enqueue.unique_by_queue OR enqueue.unique_period IS NOT NULL
       OR enqueue.unique_states IS NOT NULL THEN
        v_states := 3;
        IF enqueue.unique_states IS NOT NULL THEN
            SELECT 3 | coalesce(bit_or(CASE s WHEN 'ready' THEN 1 WHEN 'running' THEN 2 WHEN 'succeeded' THEN 4
                                              WHEN 'dead' THEN 8 ELSE 16 END), 0)
            INTO v_states FROM unnest(enqueue.unique_states) AS s;
        END IF;
        v_key := tenure.unique_key(enqueue.kind, CASE WHEN enqueue.unique_by_queue THEN enqueue.queue END,
                                   enqueue.payload, enqueue.unique_args IS NOT NULL, enqueue.unique_args,
                                   (extract(epoch FROM enqueue.unique_period) * 1000)::bigint);
    END IF;
    IF enqueue.sequence IS NOT NULL THEN
        -- A job of a sequence (migration 0023): what jobs.Client.Insert does with
        -- InsertOpts.Sequence (jobs/workflow.go, insertSequenced), in the caller's transaction.
        IF octet_length(enqueue.sequence) NOT BETWEEN 1 AND 200 THEN
            RAISE EXCEPTION 'tenure.enqueue: sequence must be 1..200 bytes' USING ERRCODE = '22023';
        END IF;
        IF v_key IS NOT NULL THEN
            RAISE EXCEPTION 'tenure.enqueue: a job in a sequence cannot be unique' USING ERRCODE = '22023';
        END IF;
        IF enqueue.sequence_on_failure IS NULL OR enqueue.sequence_on_failure NOT IN ('block', 'skip') THEN
            RAISE EXCEPTION 'tenure.enqueue: sequence_on_failure must be block or skip' USING ERRCODE = '22023';
        END IF;
        v_edge := CASE enqueue.sequence_on_failure WHEN 'skip' THEN 'run' ELSE 'block' END;
        v_prev := tenure.sequence_prev(enqueue.sequence, v_edge);
        INSERT INTO tenure.jobs AS j (queue, kind, payload, payload_version, priority, run_at, max_attempts,
                                      lease_ms, metadata, tags, state, deps_pending, has_dependents, sequence_key)
        VALUES (enqueue.queue, enqueue.kind, enqueue.payload, enqueue.payload_version, enqueue.priority,
                coalesce(enqueue.run_at, now()), enqueue.max_attempts, enqueue.lease_ms,
                coalesce(enqueue.metadata, '{}'), coalesce(enqueue.tags, '{}'),
                CASE WHEN v_prev <> 0 THEN 'waiting' ELSE 'ready' END::tenure.job_state,
                CASE WHEN v_prev <> 0 THEN 1 ELSE 0 END, true, enqueue.sequence)
        RETURNING j.id INTO v_id;
        IF v_prev <> 0 THEN
            INSERT INTO tenure.job_deps (dep_id, job_id, on_failure) VALUES (v_prev, v_id, v_edge);
        ELSIF enqueue.run_at IS NULL OR enqueue.run_at <= now() THEN
            PERFORM pg_notify('tenure_jobs', enqueue.queue || chr(31) || enqueue.priority || chr(31)
                              || (extract(epoch FROM coalesce(enqueue.run_at, now())) * 1000000)::bigint);
        END IF;
        UPDATE tenure.sequences s SET last_job_id = v_id, updated_at = now() WHERE s.key = enqueue.sequence;
        RETURN QUERY SELECT v_id, false;
        RETURN;
    ELSIF enqueue.sequence_on_failure IS DISTINCT FROM 'block' THEN
        RAISE EXCEPTION 'tenure.enqueue: sequence_on_failure needs a sequence' USING ERRCODE = '22023';
    END IF;
    LOOP
        INSERT INTO tenure.jobs AS j (queue, kind, payload, payload_version, priority, run_at, max_attempts,
                                      lease_ms, metadata, tags, unique_key, unique_states)
        VALUES (enqueue.queue, enqueue.kind, enqueue.payload, enqueue.payload_version, enqueue.priority,
                coalesce(enqueue.run_at, now()), enqueue.max_attempts, enqueue.lease_ms,
                coalesce(enqueue.metadata, '{}'), coalesce(enqueue.tags, '{}'), v_key, v_states)
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND tenure.unique_state_held(unique_states, state)
        DO NOTHING
        RETURNING j.id INTO v_id;
        IF v_id IS NOT NULL THEN
            IF enqueue.run_at IS NULL OR enqueue.run_at <= now() THEN
                -- the payload InsertJob sends: queue, band and due time (worker/claim.go)
                PERFORM pg_notify('tenure_jobs', enqueue.queue || chr(31) || enqueue.priority || chr(31)
                                  || (extract(epoch FROM coalesce(enqueue.run_at, now())) * 1000000)::bigint);
            END IF;
            RETURN QUERY SELECT v_id, false;
            RETURN;
        END IF;
        -- A duplicate: return the job holding the key. This statement takes a new snapshot,
        -- so it sees a holder that committed while the INSERT waited for it; if the holder left
        -- its unique states in between, the key is free again and the insert is retried.
        SELECT h.id INTO v_id FROM tenure.jobs h
        WHERE h.unique_key = v_key AND h.unique_key IS NOT NULL AND tenure.unique_state_held(h.unique_states, h.state);
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, true;
            RETURN;
        END IF;
        v_tries := v_tries + 1;
        IF v_tries >= 10 THEN
            RAISE EXCEPTION 'tenure.enqueue: unique key kept changing hands, giving up after % tries', v_tries
                USING ERRCODE = '40001';
        END IF;
    END LOOP;
END
$$;

-- Periodic schedules (migration 0006): one row per schedule name, holding its next tick. A
-- worker enqueues tick T only in the transaction whose conditional UPDATE moved next_run_at
-- from T to a later tick, so each tick is enqueued at most once whatever the number of workers.
CREATE TABLE tenure.periodic (
    name             text        PRIMARY KEY,
    spec             text        NOT NULL,
    kind             text        NOT NULL,
    queue            text        NOT NULL,
    next_run_at      timestamptz NOT NULL,
    last_tick_at     timestamptz,
    last_enqueued_at timestamptz,
    last_job_id      bigint,
    missed           bigint      NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT periodic_name_len CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT periodic_spec_len CHECK (char_length(spec) BETWEEN 1 AND 300),
    CONSTRAINT periodic_missed   CHECK (missed >= 0)
);

-- Operator state per queue (migration 0006). A paused queue is not claimed from by any worker.
CREATE TABLE tenure.queues (
    name       text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    paused_at  timestamptz,
    updated_by text        NOT NULL,
    reason     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT queues_name_len    CHECK (char_length(name) BETWEEN 1 AND 128),
    CONSTRAINT queues_paused_at   CHECK (paused = (paused_at IS NOT NULL)),
    CONSTRAINT queues_actor_len   CHECK (char_length(updated_by) BETWEEN 1 AND 200),
    CONSTRAINT queues_reason_len  CHECK (char_length(reason) BETWEEN 1 AND 2000)
);
-- Transactional outbox to NATS JetStream and the effect ledger of JetStream jobs (tenurenats).

-- One message to publish, written in the business transaction (tenurenats.Publish). A relay
-- claims pending rows (sent_at IS NULL, no live claim) with a fresh claim_token and a lease,
-- publishes them with msg_id as Nats-Msg-Id, and marks them sent only where its token still
-- matches (fenced). claimed_until doubles as "not before" after a failed publish.
CREATE TABLE tenure.outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    msg_id        text        NOT NULL,
    subject       text        NOT NULL,
    payload       bytea       NOT NULL,
    headers       jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    claimed_by    text,
    claim_token   uuid,
    claimed_until timestamptz,
    last_error    text,
    sent_at       timestamptz,
    stream        text,
    stream_seq    bigint,

    CONSTRAINT outbox_msg_id_unique UNIQUE (msg_id),
    CONSTRAINT outbox_msg_id_len    CHECK (char_length(msg_id) BETWEEN 1 AND 200),
    CONSTRAINT outbox_subject_len   CHECK (char_length(subject) BETWEEN 1 AND 255),
    CONSTRAINT outbox_payload_size  CHECK (octet_length(payload) <= 8388608),
    CONSTRAINT outbox_headers       CHECK (jsonb_typeof(headers) = 'object' AND pg_column_size(headers) <= 65536),
    CONSTRAINT outbox_error_len     CHECK (char_length(last_error) <= 2000),
    CONSTRAINT outbox_sent          CHECK ((sent_at IS NULL) = (stream_seq IS NULL))
);

-- Pending rows in id order: the relay's claim reads only this index's range.
CREATE INDEX outbox_pending_idx ON tenure.outbox (id) WHERE sent_at IS NULL;
-- Sent rows by send time: retention pruning.
CREATE INDEX outbox_sent_idx ON tenure.outbox (sent_at) WHERE sent_at IS NOT NULL;

-- Effect ledger of jobs consumed from JetStream (tenurenats.Worker). Keyed like tenure.effects
-- (the key carries the stream name, see tenurenats' doc), but without a job row to fence on:
-- the first attempt to record a key wins and later attempts read its result.
CREATE TABLE tenure.stream_effects (
    key         text        PRIMARY KEY,
    stream      text        NOT NULL,
    seq         bigint      NOT NULL,
    name        text        NOT NULL,
    generation  bigint      NOT NULL,
    result      jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),

    refused     text,

    CONSTRAINT stream_effects_name_len    CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT stream_effects_refused     CHECK (refused IS NULL OR (result = 'null' AND char_length(refused) BETWEEN 1 AND 2000))
);
ALTER TABLE tenure.stream_effects ADD CONSTRAINT stream_effects_result_size
    CHECK (tenure.json_size(result) <= tenure.limit('effect_result')) NOT VALID;

CREATE INDEX stream_effects_created_idx ON tenure.stream_effects (created_at);

-- Flow control state (migration 0010): one row per rate-limit group (queue, kind or '' for all
-- kinds, concurrency key or '' when the limit is not per key), and per group a handler slowed
-- with RetryAfter. started counts the claims in the fixed window beginning at window_start on the
-- database clock; blocked_until stops the group's starts until then. Written only by limited
-- claims (under the queue's limits lock) and by RetryAfter pushes.
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

-- Grants (migration 0011): claims of a queue far from its concurrency limits start jobs against
-- a budget instead of counting the running ones (worker/limits.go, "Grants"). One row per
-- (queue, limit kind or '', stripe 0..3) of a limit without PerKey and Rate: budget = jobs the
-- stripe's grant claims may still start unmarked (outside jobs_limited_idx); spent = a bound on
-- the jobs they started that may still run (only an exact recount lowers it); max_running = the
-- limit the budget was granted for. Written by exclusive limited claims (holding every stripe
-- and these rows), decremented by the stripe's grant claims.
CREATE TABLE tenure.flow_grant (
    queue       text     NOT NULL,
    kind        text     NOT NULL,
    stripe      smallint NOT NULL,
    max_running integer  NOT NULL,
    budget      integer  NOT NULL DEFAULT 0,
    spent       integer  NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, kind, stripe),

    CONSTRAINT flow_grant_budget_pos CHECK (budget >= 0),
    CONSTRAINT flow_grant_spent_pos  CHECK (spent >= 0)
);

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

-- Roles as code (issue 29, item 11): one function per surface grants a role exactly what that
-- surface's statements need (db/queries.sql), on every table of schema tenure it touches. Run
-- them as the owner of schema tenure (the role that runs the migrations), after `tenure migrate
-- up` and again after every upgrade: a migration that adds a table adds it to the functions, and
-- worker.Start refuses (worker.ErrPermission) a role that lacks what its configuration needs. Each
-- returns the GRANT statements it ran. They only grant (REVOKE by hand); a role may take several.
--   grant_reader:   SELECT on every table (dashboard read-only, `tenure serve`, tenureprom,
--                   jobs.Client reads).
--   grant_enqueuer: insert jobs (jobs.Client Insert*, tenure.enqueue, unique inserts) and
--                   outbox messages (tenurenats.Publish); read them back.
--   grant_worker:   the worker engine (claims of every kind, limits, permits, finishes, heartbeats,
--                   reclaim, pruning, effects, periodic, pause, registry) and tenurenats (relay,
--                   JetStream workers' ledger, outbox pruning). No privilege on tenure.audit.
--   grant_operator: grant_reader plus the audited operator actions (jobs.Client Cancel, Retry,
--                   Reinject, Delete, Purge, Prune, PauseQueue/ResumeQueue; dashboard actions,
--                   the CLI). The only surface that may INSERT into tenure.audit.
-- No surface may UPDATE or DELETE tenure.audit, or write tenure.schema_migrations.
CREATE FUNCTION tenure.grant_privileges(role name, grants text[]) RETURNS SETOF text
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    g    text;
    tbl  text;
    stmt text;
    -- The schema these functions live in, named through an identifier (not a literal), so the
    -- text migrated into another schema (Tenure's rewriting runner) grants on that one.
    sch  name := (SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
                  WHERE t.oid = pg_typeof(NULL::tenure.jobs));
BEGIN
    IF role IS NULL THEN
        RAISE EXCEPTION 'tenure: grant: role must not be NULL' USING ERRCODE = '22004';
    END IF;
    stmt := format('GRANT USAGE ON SCHEMA %I TO %I', sch, role);
    EXECUTE stmt;
    RETURN NEXT stmt;
    -- each entry is 'table:PRIVILEGES'
    FOREACH g IN ARRAY grants LOOP
        tbl := split_part(g, ':', 1);
        IF to_regclass(format('%I.%I', sch, tbl)) IS NULL THEN
            CONTINUE; -- schema_migrations before the runner created it (a schema.sql-only database)
        END IF;
        stmt := format('GRANT %s ON %I.%I TO %I', split_part(g, ':', 2), sch, tbl, role);
        EXECUTE stmt;
        RETURN NEXT stmt;
    END LOOP;
END
$$;

CREATE FUNCTION tenure.grant_reader(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT', 'effects:SELECT', 'audit:SELECT', 'workers:SELECT', 'periodic:SELECT',
        'queues:SELECT', 'flow:SELECT', 'flow_grant:SELECT', 'flow_permit:SELECT', 'outbox:SELECT',
        'stream_effects:SELECT', 'schema_migrations:SELECT'])
$$;

CREATE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT'])
$$;

CREATE FUNCTION tenure.grant_worker(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE, DELETE', 'effects:SELECT, INSERT, UPDATE, DELETE',
        'workers:SELECT, INSERT, UPDATE, DELETE', 'periodic:SELECT, INSERT, UPDATE', 'queues:SELECT',
        'flow:SELECT, INSERT, UPDATE, DELETE', 'flow_grant:SELECT, INSERT, UPDATE',
        'flow_permit:SELECT, INSERT, UPDATE, DELETE', 'outbox:SELECT, INSERT, UPDATE, DELETE',
        'stream_effects:SELECT, INSERT, UPDATE, DELETE', 'schema_migrations:SELECT'])
$$;

CREATE FUNCTION tenure.grant_operator(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_reader(role)
    UNION ALL
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:UPDATE, DELETE', 'effects:DELETE', 'audit:INSERT', 'queues:INSERT, UPDATE'])
$$;

REVOKE EXECUTE ON FUNCTION tenure.grant_privileges(name, text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION tenure.grant_reader(name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION tenure.grant_enqueuer(name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION tenure.grant_worker(name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION tenure.grant_operator(name) FROM PUBLIC;

-- Kind defaults declared once (issue 27 item 4): tenure.kinds, tenure.enqueue applies them,
-- and the grant functions of 0017 cover the new table.
-- Kind defaults (migration 0018): each worker publishes, at Start and with every registry
-- heartbeat, the defaults of the kinds it registers (declared with the args type,
-- generics.ArgsWithDefaults, or given as worker.HandlerOptions). tenure.enqueue applies them to
-- the arguments a caller leaves out; jobs.Client.Stats, the CLI, the dashboard and tenureprom
-- read them (with tenure.workers) to show jobs of a kind no live worker registers. A row
-- outlives its worker (enqueue keeps the defaults while every worker is down); a worker that
-- publishes a kind deletes that kind's rows of workers no longer live.
CREATE TABLE tenure.kinds (
    kind         text        NOT NULL,
    worker_id    text        NOT NULL,
    queue        text        NOT NULL,
    priority     smallint    NOT NULL,
    max_attempts integer     NOT NULL,
    lease_ms     integer     NOT NULL,
    timeout_ms   bigint      NOT NULL,
    published_at timestamptz NOT NULL DEFAULT now(),
    -- Delete on success (migration 0024): the publishing worker deletes the kind's succeeded
    -- jobs (docs/guide.md §28), so counts read from tenure.jobs show none of them.
    delete_on_success boolean NOT NULL DEFAULT false,

    PRIMARY KEY (kind, worker_id),
    CONSTRAINT kinds_kind_len      CHECK (char_length(kind) BETWEEN 1 AND 128),
    CONSTRAINT kinds_worker_id_len CHECK (char_length(worker_id) BETWEEN 1 AND 200),
    CONSTRAINT kinds_queue_name    CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    CONSTRAINT kinds_priority      CHECK (priority BETWEEN 1 AND 9),
    CONSTRAINT kinds_max_attempts  CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT kinds_lease         CHECK (lease_ms BETWEEN 1000 AND 86400000),
    CONSTRAINT kinds_timeout       CHECK (timeout_ms >= 0)
);



CREATE OR REPLACE FUNCTION tenure.grant_reader(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT', 'effects:SELECT', 'audit:SELECT', 'workers:SELECT', 'periodic:SELECT',
        'queues:SELECT', 'flow:SELECT', 'flow_grant:SELECT', 'flow_permit:SELECT', 'outbox:SELECT',
        'stream_effects:SELECT', 'schema_migrations:SELECT', 'kinds:SELECT'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT', 'kinds:SELECT'])
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
        'kinds:SELECT, INSERT, UPDATE, DELETE'])
$$;


-- One ownership statement (issue 28 item 1): tenure.own, the UPDATE every claim statement
-- feeds the ids it picked into.
-- tenure.own: the claim's ownership write, the system's core invariant written once
-- (docs/contract.md §1, docs/design.md "The claim path"). Every claim statement of
-- db/queries.sql picks its rows with FOR UPDATE SKIP LOCKED and passes their ids here, in the
-- same statement. For each given id whose row is still ready it sets state running, the owner,
-- the lease (kind_lease_ms: the worker's lease per kind of kinds, 0 = the job's stored
-- lease_ms) counted from the claim's clock, a fresh claim token, generation + 1, attempts + 1,
-- attempted_at (attempted_at, or the claim's clock) and updated_at, and returns the owned rows.
-- The claim's clock is clock_timestamp() read as own starts, after the claim statement took its
-- snapshot: later than the commit of every finish whose effect the claim saw (migration 0025). A row that is not ready is left alone: a
-- running job cannot be owned twice, whatever the caller passes.
-- limit_kinds: NULL leaves the limited mark as it is; otherwise a row is marked limited (it
-- enters jobs_limited_idx) when its kind is in the list or the list holds '' (a limit covering
-- every kind); '{}' clears the mark.
-- PL/pgSQL, so the UPDATE's plan (a primary-key lookup) is prepared once per session.
CREATE FUNCTION tenure.own(ids bigint[], worker_id text, kinds text[], kind_lease_ms integer[],
                           limit_kinds text[] DEFAULT NULL, attempted_at timestamptz DEFAULT NULL)
    RETURNS SETOF tenure.jobs
    LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    -- The claim's clock: read once, when the claim statement has taken its snapshot, so it
    -- is later than the commit of every finish whose effect (a released task, a freed
    -- sequence or limit) the claim saw.
    t timestamptz := clock_timestamp();
    -- The claim tokens (migration 0030): one random uuid per call, b; a row's token is b with
    -- its last 8 bytes XORed with the row's id. Within a call the ids differ, so the tokens
    -- do; two calls draw independent b, so two attempts of one job share a token only if 64
    -- random bits repeat. gen_random_uuid() per row cost ~4 us each (OpenSSL RAND_bytes), 15 %
    -- of this function's time at 30 rows (bench/results/2026-12-03-pgcpu.md). The version and
    -- variant bits of b stay for ids below 2^62.
    b  uuid   := gen_random_uuid();
    lo bigint := ('x' || right(replace(b::text, '-', ''), 16))::bit(64)::bigint;
BEGIN
    RETURN QUERY
    UPDATE tenure.jobs j
    SET state        = 'running',
        locked_by    = own.worker_id,
        lease_ms     = coalesce(nullif(own.kind_lease_ms[array_position(own.kinds, j.kind::text)], 0), j.lease_ms),
        locked_until = t + coalesce(nullif(own.kind_lease_ms[array_position(own.kinds, j.kind::text)], 0), j.lease_ms)
                               * interval '1 millisecond',
        claim_token  = encode(overlay(uuid_send(b) PLACING int8send(lo # j.id) FROM 9), 'hex')::uuid,
        generation   = j.generation + 1,
        attempts     = j.attempts + 1,
        attempted_at = coalesce(own.attempted_at, t),
        updated_at   = now(),
        limited      = CASE WHEN own.limit_kinds IS NULL THEN j.limited
                            ELSE '' = ANY (own.limit_kinds) OR j.kind::text = ANY (own.limit_kinds) END
    -- state compared as text: `state = 'ready'` would make jobs_ready_idx (partial, WHERE
    -- state = 'ready') a candidate path, and a generic plan made from a drained queue's
    -- statistics walks the whole ready set through it instead of looking the ids up
    -- (TestEngineStatementsPlanIndexPathsOnATinyTable; measured in bench steady: 3x the claim's
    -- time). Compared as text the check is a filter on the primary-key lookup.
    WHERE j.id = ANY (own.ids) AND j.state::text = 'ready'
    RETURNING j.*;
END
$$;


-- Workflows and sequences (migration 0020): the enum value, domains and columns are above.
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
    -- the stripe of an edge into a striped dependent (migration 0028); NULL: the count is on
    -- the dependent's row (deps_pending)
    stripe     smallint,
    PRIMARY KEY (dep_id, job_id),

    CONSTRAINT job_deps_on_failure CHECK (on_failure IN ('cancel', 'run', 'block')),
    CONSTRAINT job_deps_not_self   CHECK (dep_id <> job_id)
) WITH (fillfactor = 50); -- resolving an edge is a HOT update (migration 0028)
-- A task's dependencies (worker.DependencyOutput, the views).
CREATE INDEX job_deps_job_idx ON tenure.job_deps (job_id);

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

-- The last job inserted in each sequence. Inserting into a sequence locks the key's row
-- (tenure.sequence_prev), so the inserts of one key are ordered, and each new job waits on the
-- one before it.
CREATE TABLE tenure.sequences (
    key         text        PRIMARY KEY,
    last_job_id bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A workflow's tasks by name; rows of no workflow never enter it. Not unique (migration 0031):
-- a unique index checks every new version of a task against its earlier ones; the workflow's
-- id is unique in tenure.workflows, and task names are unique by construction.
CREATE INDEX jobs_workflow_idx ON tenure.jobs (workflow_id, task_name) WHERE workflow_id IS NOT NULL;

-- One row per workflow, written by its insert's first statement (InsertFlowJobs; migration
-- 0031): a workflow id is taken once (jobs.ErrWorkflowExists), until the retention pruning
-- deletes the row of a workflow with no task left (PruneWorkflowsBatch).
CREATE TABLE tenure.workflows (
    id         uuid        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- A sequence's jobs in order; rows of no sequence never enter it.
CREATE INDEX jobs_sequence_idx ON tenure.jobs (sequence_key, id) WHERE sequence_key IS NOT NULL;

-- Settles the dependents of jobs that just reached a final state (ids, with their states):
-- each unresolved edge out of them is resolved, and each dependent still waiting is
--   released (waiting -> ready, due at its own run_at or now, with the new-job signal) when its
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
-- With striped dependents (migration 0028): Per round:
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
-- The signals (migration 0029): the new-job NOTIFY of the released (woken) and the done NOTIFY
-- of the cancelled (ended) are sent in this transaction unless it set tenure.signals to
-- 'after_commit' (set_config, transaction-local), as the engine's finish statements do
-- (CompleteMany, FailMany, ReleaseMany, SnoozeMany): the engine then sends both after the
-- commit, reading what the dependents of the jobs it finished became (NotifyDoneSettled). A
-- NOTIFY in a writing transaction holds PostgreSQL's one notification-queue lock from the
-- commit's start through its WAL flush, serializing every finish that released something
-- with every other notifying commit (docs/design.md, "The done signal after the commit").
-- Callers with no Go side after their commit (CompleteTx's CompleteOne, the operator's
-- cancels, finishes written in SQL) do not set it and notify here.
CREATE FUNCTION tenure.settle_jobs(ids bigint[], states text[]) RETURNS void
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
    -- Create or lock the key's row. The retention pruning deletes the rows of keys whose last
    -- job is gone (PruneSequencesBatch, migration 0023): a row deleted between the INSERT
    -- (which found it) and the lock is created again, so the key is always locked here.
    LOOP
        INSERT INTO tenure.sequences AS s (key) VALUES (seq_key) ON CONFLICT (key) DO NOTHING;
        SELECT s.last_job_id INTO prev FROM tenure.sequences s WHERE s.key = seq_key FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;
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
        'sequences:SELECT', 'job_dep_stripes:SELECT', 'workflows:SELECT'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE (has_dependents)', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT',
        'kinds:SELECT', 'job_deps:SELECT, INSERT', 'sequences:SELECT, INSERT, UPDATE',
        'job_dep_stripes:SELECT, INSERT', 'workflows:SELECT, INSERT'])
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
        'sequences:SELECT, UPDATE, DELETE', 'job_dep_stripes:SELECT, UPDATE, DELETE',
        'workflows:SELECT, DELETE'])
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

-- Jobs waiting on dependencies, by queue, kind and age (migration 0022): the cluster metrics and
-- the dashboard count them from this index alone. Only waiting rows enter it.
CREATE INDEX jobs_waiting_idx ON tenure.jobs (queue, kind, created_at) WHERE state = 'waiting';
