-- Reverts 0016: the pg_column_size bounds, no refused effects, plain timestamptz job times.
-- Refused effect records are kept as applied effects with a null result.
ALTER TABLE tenure.jobs
    ALTER COLUMN run_at TYPE timestamptz,
    ALTER COLUMN locked_until TYPE timestamptz,
    ALTER COLUMN attempted_at TYPE timestamptz,
    ALTER COLUMN created_at TYPE timestamptz,
    ALTER COLUMN updated_at TYPE timestamptz,
    ALTER COLUMN finished_at TYPE timestamptz,
    ALTER COLUMN cancel_requested_at TYPE timestamptz;
DROP DOMAIN tenure.job_time;

ALTER TABLE tenure.stream_effects DROP CONSTRAINT stream_effects_result_size;
ALTER TABLE tenure.stream_effects DROP CONSTRAINT stream_effects_refused;
ALTER TABLE tenure.stream_effects DROP COLUMN refused;
ALTER TABLE tenure.stream_effects ADD CONSTRAINT stream_effects_result_size CHECK (pg_column_size(result) <= 65536);

ALTER TABLE tenure.effects DROP CONSTRAINT effects_result_size;
ALTER TABLE tenure.effects DROP CONSTRAINT effects_refused;
ALTER TABLE tenure.effects DROP COLUMN refused;
ALTER TABLE tenure.effects ADD CONSTRAINT effects_result_size CHECK (pg_column_size(result) <= 65536);

ALTER DOMAIN tenure.job_metadata DROP CONSTRAINT jobs_metadata_size;
ALTER DOMAIN tenure.job_metadata ADD CONSTRAINT jobs_metadata_size CHECK (pg_column_size(VALUE) <= 8192);
ALTER DOMAIN tenure.job_output DROP CONSTRAINT jobs_output_size;
ALTER DOMAIN tenure.job_output ADD CONSTRAINT jobs_output_size CHECK (pg_column_size(VALUE) <= 32768);

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

DROP FUNCTION tenure.json_size(jsonb);
DROP FUNCTION tenure.limit(text);
