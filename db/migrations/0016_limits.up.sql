-- One definition of every limit, shared by Go, SQL functions and constraints (issue 29, items
-- 1, 2 and 5).
--
-- Before: the database bounded outputs, effect results and metadata by pg_column_size (their
-- stored, possibly compressed size) while Go bounded the JSON it encoded. The two disagree: a
-- 14,496-byte array of small integers, accepted by worker.SetOutput (16 KiB), is more than
-- 32 KiB stored, so the finish that carried it was refused and the handler ran again. Now both
-- sides measure the jsonb text (tenure.json_size; generics.JSONSize computes the same in Go)
-- against the same numbers (tenure.limit; the constants of generics/limits.go, checked equal
-- by a test). The new size checks are added NOT VALID: rows written before this migration are
-- not re-read (the old bounds admitted them), every new write is checked.
--
-- An effect whose result cannot be recorded is still recorded as applied: tenure.effects and
-- tenure.stream_effects gain `refused` (why the result was not kept; result is then JSON null).
--
-- Job times: a run_at of 'infinity' or 4000 BC was accepted and then broke every reader (Go
-- cannot scan infinity into a time.Time; durations overflowed). Every timestamp of a job now
-- lies in [1970-01-01, 2200-01-01) UTC (domain tenure.job_time); rows outside it are moved to
-- its edges first (an infinite run_at becomes 2199-12-31 23:59:59 UTC: still "never" in practice).
--
-- Cost: the domain change does not rewrite tenure.jobs (the domain is attached without a
-- constraint, then the constraint is added, which reads the table once under the migration's
-- lock). The size checks cost one jsonb-to-text rendering per written output, effect result
-- and non-empty metadata.

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

ALTER DOMAIN tenure.job_output DROP CONSTRAINT jobs_output_size;
ALTER DOMAIN tenure.job_output ADD CONSTRAINT jobs_output_size
    CHECK (tenure.json_size(VALUE) <= tenure.limit('output')) NOT VALID;

ALTER DOMAIN tenure.job_metadata DROP CONSTRAINT jobs_metadata_size;
ALTER DOMAIN tenure.job_metadata ADD CONSTRAINT jobs_metadata_size
    CHECK (VALUE = '{}' OR tenure.json_size(VALUE) <= tenure.limit('metadata')) NOT VALID;

ALTER TABLE tenure.effects DROP CONSTRAINT effects_result_size;
ALTER TABLE tenure.effects ADD COLUMN refused text;
ALTER TABLE tenure.effects ADD CONSTRAINT effects_refused
    CHECK (refused IS NULL OR (result = 'null' AND char_length(refused) BETWEEN 1 AND 2000));
ALTER TABLE tenure.effects ADD CONSTRAINT effects_result_size
    CHECK (tenure.json_size(result) <= tenure.limit('effect_result')) NOT VALID;

ALTER TABLE tenure.stream_effects DROP CONSTRAINT stream_effects_result_size;
ALTER TABLE tenure.stream_effects ADD COLUMN refused text;
ALTER TABLE tenure.stream_effects ADD CONSTRAINT stream_effects_refused
    CHECK (refused IS NULL OR (result = 'null' AND char_length(refused) BETWEEN 1 AND 2000));
ALTER TABLE tenure.stream_effects ADD CONSTRAINT stream_effects_result_size
    CHECK (tenure.json_size(result) <= tenure.limit('effect_result')) NOT VALID;

-- Job times (greatest and least ignore NULLs, hence the CASEs).
CREATE DOMAIN tenure.job_time AS timestamptz;
UPDATE tenure.jobs SET
    run_at = CASE WHEN run_at IS NOT NULL THEN least(greatest(run_at, '1970-01-01 00:00:00+00'), '2199-12-31 23:59:59+00') END,
    created_at = CASE WHEN created_at IS NOT NULL THEN least(greatest(created_at, '1970-01-01 00:00:00+00'), '2199-12-31 23:59:59+00') END,
    updated_at = CASE WHEN updated_at IS NOT NULL THEN least(greatest(updated_at, '1970-01-01 00:00:00+00'), '2199-12-31 23:59:59+00') END,
    locked_until = CASE WHEN locked_until IS NOT NULL THEN least(greatest(locked_until, '1970-01-01 00:00:00+00'), '2199-12-31 23:59:59+00') END,
    attempted_at = CASE WHEN attempted_at IS NOT NULL THEN least(greatest(attempted_at, '1970-01-01 00:00:00+00'), '2199-12-31 23:59:59+00') END,
    finished_at = CASE WHEN finished_at IS NOT NULL THEN least(greatest(finished_at, '1970-01-01 00:00:00+00'), '2199-12-31 23:59:59+00') END,
    cancel_requested_at = CASE WHEN cancel_requested_at IS NOT NULL THEN least(greatest(cancel_requested_at, '1970-01-01 00:00:00+00'), '2199-12-31 23:59:59+00') END
WHERE NOT (run_at >= '1970-01-01 00:00:00+00' AND run_at < '2200-01-01 00:00:00+00')
   OR NOT (created_at >= '1970-01-01 00:00:00+00' AND created_at < '2200-01-01 00:00:00+00')
   OR NOT (updated_at >= '1970-01-01 00:00:00+00' AND updated_at < '2200-01-01 00:00:00+00')
   OR NOT coalesce(locked_until >= '1970-01-01 00:00:00+00' AND locked_until < '2200-01-01 00:00:00+00', true)
   OR NOT coalesce(attempted_at >= '1970-01-01 00:00:00+00' AND attempted_at < '2200-01-01 00:00:00+00', true)
   OR NOT coalesce(finished_at >= '1970-01-01 00:00:00+00' AND finished_at < '2200-01-01 00:00:00+00', true)
   OR NOT coalesce(cancel_requested_at >= '1970-01-01 00:00:00+00' AND cancel_requested_at < '2200-01-01 00:00:00+00', true);
ALTER TABLE tenure.jobs
    ALTER COLUMN run_at TYPE tenure.job_time,
    ALTER COLUMN locked_until TYPE tenure.job_time,
    ALTER COLUMN attempted_at TYPE tenure.job_time,
    ALTER COLUMN created_at TYPE tenure.job_time,
    ALTER COLUMN updated_at TYPE tenure.job_time,
    ALTER COLUMN finished_at TYPE tenure.job_time,
    ALTER COLUMN cancel_requested_at TYPE tenure.job_time;
ALTER DOMAIN tenure.job_time ADD CONSTRAINT jobs_time_range
    CHECK (VALUE >= '1970-01-01 00:00:00+00' AND VALUE < '2200-01-01 00:00:00+00');

-- tenure.enqueue applies the same limits and the job-time window, with clear errors.
CREATE OR REPLACE FUNCTION tenure.enqueue(
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
