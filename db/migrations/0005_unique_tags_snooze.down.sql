-- Reverts 0005_unique_tags_snooze.
DROP FUNCTION IF EXISTS tenure.enqueue;
DROP INDEX IF EXISTS tenure.jobs_tags_idx;
DROP INDEX IF EXISTS tenure.jobs_unique_idx;
ALTER TABLE tenure.jobs
    DROP COLUMN IF EXISTS unique_key,
    DROP COLUMN IF EXISTS unique_states,
    DROP COLUMN IF EXISTS tags,
    DROP COLUMN IF EXISTS output,
    DROP COLUMN IF EXISTS snoozes;
DROP FUNCTION IF EXISTS tenure.unique_key;
DROP FUNCTION IF EXISTS tenure.unique_state_held;
