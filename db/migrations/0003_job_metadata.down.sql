-- Reverts 0003_job_metadata.
ALTER TABLE tenure.jobs DROP COLUMN IF EXISTS metadata;
