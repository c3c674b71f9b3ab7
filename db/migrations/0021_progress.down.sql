-- Reverts 0021_progress.
ALTER TABLE tenure.jobs DROP COLUMN progress;
