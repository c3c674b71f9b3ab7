-- Reverts 0022_waiting_idx.
DROP INDEX tenure.jobs_waiting_idx;
