-- Reverts 0015_jobs_autovacuum: tenure.jobs takes the server's autovacuum settings again.
ALTER TABLE tenure.jobs RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_cost_limit);
