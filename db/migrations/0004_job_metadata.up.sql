-- Job metadata: string key/value pairs the enqueuer attaches to a job and the handler reads
-- back (a W3C trace context, a request id). Adding a NOT NULL column with a constant default
-- rewrites nothing (PostgreSQL 11+); the CHECKs scan the table once under this migration's lock.
ALTER TABLE tenure.jobs
    ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}',
    -- an object whose values are all strings
    ADD CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(metadata) = 'object'
        AND NOT jsonb_path_exists(metadata, '$.* ? (@.type() != "string")')),
    ADD CONSTRAINT jobs_metadata_size CHECK (pg_column_size(metadata) <= 8192);
