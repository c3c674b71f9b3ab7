-- Single-column rules of tenure.jobs become domains (issue 17, "low load").
--
-- PostgreSQL re-reads, plans and evaluates every CHECK constraint of a table on every INSERT
-- and every UPDATE of a row, whichever columns the UPDATE sets; a domain's constraints are
-- checked only where a value is assigned to the column. The engine's claim and finish updates
-- set only a few of these columns (the claim lease_ms and generation, a completion output, a
-- failure errors and last_error_code), each a check of one value, and with 24 table CHECKs each
-- one-row statement paid about 60 us for them. The rules and their names are unchanged: only where they are checked.
-- What relates several columns (the state machine's invariants) stays a table CHECK.
--
-- Cost of this migration: the column type changes need no table rewrite (each domain is
-- created without its constraint first, and a domain over the column's own type is binary
-- compatible); the indexes on expressions of changed columns (jobs_unique_idx, jobs_fair_idx,
-- jobs_limited_idx, all partial and small) are rebuilt; adding each domain constraint then reads
-- the table once to check the existing rows, which the table CHECKs dropped here had already
-- guaranteed. All of it holds tenure.jobs's exclusive lock until the migration commits:
-- enqueues, claims and finishes wait meanwhile.

CREATE DOMAIN tenure.queue_name AS text;
CREATE DOMAIN tenure.kind_name AS text;
CREATE DOMAIN tenure.job_payload AS jsonb;
CREATE DOMAIN tenure.payload_version AS integer;
CREATE DOMAIN tenure.job_priority AS smallint;
CREATE DOMAIN tenure.max_attempts AS integer;
CREATE DOMAIN tenure.lease_ms AS integer;
CREATE DOMAIN tenure.job_generation AS bigint;
CREATE DOMAIN tenure.error_list AS jsonb;
CREATE DOMAIN tenure.error_code AS text;
CREATE DOMAIN tenure.job_metadata AS jsonb;
CREATE DOMAIN tenure.unique_key_hash AS bytea;
CREATE DOMAIN tenure.unique_state_set AS smallint;
CREATE DOMAIN tenure.tag_list AS text[];
CREATE DOMAIN tenure.job_output AS jsonb;
CREATE DOMAIN tenure.snooze_count AS integer;

ALTER TABLE tenure.jobs
    DROP CONSTRAINT jobs_queue_len,
    DROP CONSTRAINT jobs_kind_len,
    DROP CONSTRAINT jobs_payload_object,
    DROP CONSTRAINT jobs_version_pos,
    DROP CONSTRAINT jobs_priority_range,
    DROP CONSTRAINT jobs_max_attempts,
    DROP CONSTRAINT jobs_lease_range,
    DROP CONSTRAINT jobs_generation_pos,
    DROP CONSTRAINT jobs_errors_array,
    DROP CONSTRAINT jobs_error_code,
    DROP CONSTRAINT jobs_metadata_object,
    DROP CONSTRAINT jobs_metadata_size,
    DROP CONSTRAINT jobs_unique_states,
    DROP CONSTRAINT jobs_unique_key_len,
    DROP CONSTRAINT jobs_tags_valid,
    DROP CONSTRAINT jobs_output_size,
    DROP CONSTRAINT jobs_snoozes_pos,
    ALTER COLUMN queue TYPE tenure.queue_name,
    ALTER COLUMN kind TYPE tenure.kind_name,
    ALTER COLUMN payload TYPE tenure.job_payload,
    ALTER COLUMN payload_version TYPE tenure.payload_version,
    ALTER COLUMN priority TYPE tenure.job_priority,
    ALTER COLUMN max_attempts TYPE tenure.max_attempts,
    ALTER COLUMN lease_ms TYPE tenure.lease_ms,
    ALTER COLUMN generation TYPE tenure.job_generation,
    ALTER COLUMN errors TYPE tenure.error_list,
    ALTER COLUMN last_error_code TYPE tenure.error_code,
    ALTER COLUMN metadata TYPE tenure.job_metadata,
    ALTER COLUMN unique_key TYPE tenure.unique_key_hash,
    ALTER COLUMN unique_states TYPE tenure.unique_state_set,
    ALTER COLUMN tags TYPE tenure.tag_list,
    ALTER COLUMN output TYPE tenure.job_output,
    ALTER COLUMN snoozes TYPE tenure.snooze_count;

ALTER DOMAIN tenure.queue_name ADD CONSTRAINT jobs_queue_len CHECK (char_length(VALUE) BETWEEN 1 AND 128);
ALTER DOMAIN tenure.kind_name ADD CONSTRAINT jobs_kind_len CHECK (char_length(VALUE) BETWEEN 1 AND 128);
ALTER DOMAIN tenure.job_payload ADD CONSTRAINT jobs_payload_object CHECK (jsonb_typeof(VALUE) = 'object');
ALTER DOMAIN tenure.payload_version ADD CONSTRAINT jobs_version_pos CHECK (VALUE >= 1);
ALTER DOMAIN tenure.job_priority ADD CONSTRAINT jobs_priority_range CHECK (VALUE BETWEEN 1 AND 9);
ALTER DOMAIN tenure.max_attempts ADD CONSTRAINT jobs_max_attempts CHECK (VALUE BETWEEN 1 AND 1000);
ALTER DOMAIN tenure.lease_ms ADD CONSTRAINT jobs_lease_range CHECK (VALUE BETWEEN 1000 AND 86400000);
ALTER DOMAIN tenure.job_generation ADD CONSTRAINT jobs_generation_pos CHECK (VALUE >= 0);
ALTER DOMAIN tenure.error_list ADD CONSTRAINT jobs_errors_array CHECK (jsonb_typeof(VALUE) = 'array');
ALTER DOMAIN tenure.error_code ADD CONSTRAINT jobs_error_code CHECK (VALUE ~ '^[A-Z][A-Z_]{0,39}$');
ALTER DOMAIN tenure.job_metadata ADD CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(VALUE) = 'object'
    AND NOT jsonb_path_exists(VALUE, '$.* ? (@.type() != "string")'));
ALTER DOMAIN tenure.job_metadata ADD CONSTRAINT jobs_metadata_size CHECK (pg_column_size(VALUE) <= 8192);
ALTER DOMAIN tenure.unique_key_hash ADD CONSTRAINT jobs_unique_key_len CHECK (octet_length(VALUE) = 32);
ALTER DOMAIN tenure.unique_state_set ADD CONSTRAINT jobs_unique_states CHECK (VALUE BETWEEN 3 AND 31 AND (VALUE & 3) = 3);
ALTER DOMAIN tenure.tag_list ADD CONSTRAINT jobs_tags_valid CHECK (cardinality(VALUE) <= 16 AND coalesce(array_ndims(VALUE), 1) = 1
    AND array_position(VALUE, NULL) IS NULL
    AND (cardinality(VALUE) = 0 OR (E'\n' || array_to_string(VALUE, E'\n')) ~ '^(\n[A-Za-z0-9][A-Za-z0-9_.:/=+-]{0,63})+$'));
ALTER DOMAIN tenure.job_output ADD CONSTRAINT jobs_output_size CHECK (pg_column_size(VALUE) <= 32768);
ALTER DOMAIN tenure.snooze_count ADD CONSTRAINT jobs_snoozes_pos CHECK (VALUE >= 0);
