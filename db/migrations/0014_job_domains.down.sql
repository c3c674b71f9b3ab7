-- Reverts 0014_job_domains: the columns take their base types again (no rewrite) and the
-- rules become table CHECKs again (one read of the table to check the existing rows).
ALTER TABLE tenure.jobs
    ALTER COLUMN queue TYPE text,
    ALTER COLUMN kind TYPE text,
    ALTER COLUMN payload TYPE jsonb,
    ALTER COLUMN payload_version TYPE integer,
    ALTER COLUMN priority TYPE smallint,
    ALTER COLUMN max_attempts TYPE integer,
    ALTER COLUMN lease_ms TYPE integer,
    ALTER COLUMN generation TYPE bigint,
    ALTER COLUMN errors TYPE jsonb,
    ALTER COLUMN last_error_code TYPE text,
    ALTER COLUMN metadata TYPE jsonb,
    ALTER COLUMN unique_key TYPE bytea,
    ALTER COLUMN unique_states TYPE smallint,
    ALTER COLUMN tags TYPE text[],
    ALTER COLUMN output TYPE jsonb,
    ALTER COLUMN snoozes TYPE integer,
    ADD CONSTRAINT jobs_queue_len      CHECK (char_length(queue) BETWEEN 1 AND 128),
    ADD CONSTRAINT jobs_kind_len       CHECK (char_length(kind) BETWEEN 1 AND 128),
    ADD CONSTRAINT jobs_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    ADD CONSTRAINT jobs_version_pos    CHECK (payload_version >= 1),
    ADD CONSTRAINT jobs_priority_range CHECK (priority BETWEEN 1 AND 9),
    ADD CONSTRAINT jobs_max_attempts   CHECK (max_attempts BETWEEN 1 AND 1000),
    ADD CONSTRAINT jobs_lease_range    CHECK (lease_ms BETWEEN 1000 AND 86400000),
    ADD CONSTRAINT jobs_generation_pos CHECK (generation >= 0),
    ADD CONSTRAINT jobs_errors_array   CHECK (jsonb_typeof(errors) = 'array'),
    ADD CONSTRAINT jobs_error_code     CHECK (last_error_code IS NULL OR last_error_code ~ '^[A-Z][A-Z_]{0,39}$'),
    ADD CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(metadata) = 'object'
        AND NOT jsonb_path_exists(metadata, '$.* ? (@.type() != "string")')),
    ADD CONSTRAINT jobs_metadata_size  CHECK (pg_column_size(metadata) <= 8192),
    ADD CONSTRAINT jobs_unique_states  CHECK (unique_states IS NULL OR (unique_states BETWEEN 3 AND 31 AND (unique_states & 3) = 3)),
    ADD CONSTRAINT jobs_unique_key_len CHECK (unique_key IS NULL OR octet_length(unique_key) = 32),
    ADD CONSTRAINT jobs_tags_valid     CHECK (cardinality(tags) <= 16 AND coalesce(array_ndims(tags), 1) = 1
        AND array_position(tags, NULL) IS NULL
        AND (cardinality(tags) = 0 OR (E'\n' || array_to_string(tags, E'\n')) ~ '^(\n[A-Za-z0-9][A-Za-z0-9_.:/=+-]{0,63})+$')),
    ADD CONSTRAINT jobs_output_size    CHECK (output IS NULL OR pg_column_size(output) <= 32768),
    ADD CONSTRAINT jobs_snoozes_pos    CHECK (snoozes >= 0);
DROP DOMAIN tenure.queue_name, tenure.kind_name, tenure.job_payload, tenure.payload_version,
    tenure.job_priority, tenure.max_attempts, tenure.lease_ms, tenure.job_generation,
    tenure.error_list, tenure.error_code, tenure.job_metadata, tenure.unique_key_hash,
    tenure.unique_state_set, tenure.tag_list, tenure.job_output, tenure.snooze_count;
