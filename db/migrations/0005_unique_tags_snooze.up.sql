-- Unique jobs, SQL enqueue, tags, handler output and snooze (issue 13).
-- Every new column is nullable or has a constant default, so adding it rewrites nothing and
-- existing rows keep working (no unique key, no tags, no output, never snoozed).

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

ALTER TABLE tenure.jobs
    -- unique jobs: the key and the states that hold it (both set or both null)
    ADD COLUMN unique_key    bytea,
    ADD COLUMN unique_states smallint,
    -- short labels set at insert, searchable through jobs_tags_idx
    ADD COLUMN tags          text[]  NOT NULL DEFAULT '{}',
    -- what the handler recorded (worker.SetOutput), written by the fenced completion
    ADD COLUMN output        jsonb,
    -- how often the job snoozed (worker.Snooze): a snooze does not consume an attempt
    ADD COLUMN snoozes       integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT jobs_unique_pair   CHECK ((unique_key IS NULL) = (unique_states IS NULL)),
    -- ready and running always hold the key, so no engine transition can collide
    ADD CONSTRAINT jobs_unique_states CHECK (unique_states IS NULL OR (unique_states BETWEEN 3 AND 31 AND (unique_states & 3) = 3)),
    ADD CONSTRAINT jobs_unique_key_len CHECK (unique_key IS NULL OR octet_length(unique_key) = 32),
    ADD CONSTRAINT jobs_tags_valid    CHECK (cardinality(tags) <= 16 AND coalesce(array_ndims(tags), 1) = 1
        AND array_position(tags, NULL) IS NULL
        AND (cardinality(tags) = 0 OR (E'\n' || array_to_string(tags, E'\n')) ~ '^(\n[A-Za-z0-9][A-Za-z0-9_.:/=+-]{0,63})+$')),
    ADD CONSTRAINT jobs_output_size   CHECK (output IS NULL OR pg_column_size(output) <= 32768),
    ADD CONSTRAINT jobs_snoozes_pos   CHECK (snoozes >= 0);

-- At most one job per unique key among the jobs whose state holds it. INSERT ... ON CONFLICT
-- names this predicate exactly. A job leaving its unique states (finished, dead, cancelled)
-- leaves the index and frees the key; the key stays in its row for operators to read.
CREATE UNIQUE INDEX jobs_unique_idx ON tenure.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND tenure.unique_state_held(unique_states, state);

-- Search by tag (jobs.ListParams.Tags: every listed tag present). Partial: untagged jobs
-- (most) never enter it, so their claims and finishes (non-HOT updates) add no GIN entries.
CREATE INDEX jobs_tags_idx ON tenure.jobs USING gin (tags) WHERE tags <> '{}';

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
CREATE FUNCTION tenure.enqueue(
    kind            text,
    payload         jsonb,
    queue           text                DEFAULT 'default',
    priority        integer             DEFAULT 2,
    run_at          timestamptz         DEFAULT NULL,
    max_attempts    integer             DEFAULT 25,
    metadata        jsonb               DEFAULT '{}',
    tags            text[]              DEFAULT '{}',
    payload_version integer             DEFAULT 1,
    lease_ms        integer             DEFAULT 30000,
    unique_args     text[]              DEFAULT NULL,
    unique_by_queue boolean             DEFAULT false,
    unique_period   interval            DEFAULT NULL,
    unique_states   tenure.job_state[]  DEFAULT NULL
) RETURNS TABLE (id bigint, duplicate boolean)
    LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_key    bytea;
    v_states smallint;
    v_id     bigint;
    v_tries  integer := 0;
BEGIN
    IF enqueue.kind IS NULL OR char_length(enqueue.kind) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'tenure.enqueue: kind must be 1..128 characters' USING ERRCODE = '22023';
    END IF;
    IF enqueue.payload IS NULL OR jsonb_typeof(enqueue.payload) <> 'object' THEN
        RAISE EXCEPTION 'tenure.enqueue: payload must be a JSON object' USING ERRCODE = '22023';
    END IF;
    IF octet_length(enqueue.payload::text) > 65536 THEN
        RAISE EXCEPTION 'tenure.enqueue: payload is % bytes encoded, at most 65536 allowed',
            octet_length(enqueue.payload::text) USING ERRCODE = '22023';
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
