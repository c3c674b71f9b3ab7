-- Sequences on every insert path (migration 0023, issue 30).
--
-- tenure.enqueue takes sequence and sequence_on_failure ('block', the default, or 'skip'), so
-- a job enqueued from SQL joins a sequence as jobs.Client.Insert's InsertOpts.Sequence does:
-- the key's row is locked until the caller's transaction ends, the job waits for the key's
-- previous job, and is recorded as the key's last. Its signature grows, so it is dropped and
-- created again (calls naming the earlier arguments, or passing them by position, are
-- unchanged).
--
-- The retention pruning deletes the tenure.sequences rows whose last job is gone
-- (PruneSequencesBatch): tenure.sequence_prev creates a row deleted under it again instead of
-- going on without the key's lock, and grant_worker gains SELECT, UPDATE (the pruning's row
-- locks) and DELETE on sequences (run it again for existing worker roles).
CREATE OR REPLACE FUNCTION tenure.sequence_prev(seq_key text, on_failure text) RETURNS bigint
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

DROP FUNCTION tenure.enqueue(text, jsonb, text, integer, timestamptz, integer, jsonb, text[], integer, integer,
    text[], boolean, interval, tenure.job_state[]);

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
