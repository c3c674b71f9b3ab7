-- Reverts 0007_cluster_index_only: the indexes without their INCLUDE columns.
DROP INDEX tenure.jobs_ready_idx;
CREATE INDEX jobs_ready_idx ON tenure.jobs (queue, priority DESC, run_at, id) WHERE state = 'ready';
DROP INDEX tenure.jobs_dead_idx;
CREATE INDEX jobs_dead_idx ON tenure.jobs (queue, kind, id) WHERE state = 'dead';
