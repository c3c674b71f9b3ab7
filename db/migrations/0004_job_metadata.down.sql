-- Reverts 0004_job_metadata.
ALTER TABLE tenure.jobs DROP COLUMN IF EXISTS metadata;
