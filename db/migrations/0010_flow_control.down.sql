-- Reverts 0010_flow_control.
DROP TABLE IF EXISTS tenure.flow;
DROP INDEX IF EXISTS tenure.jobs_limited_idx;
ALTER TABLE tenure.jobs DROP COLUMN IF EXISTS limited;
