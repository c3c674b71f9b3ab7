-- Cluster metrics read only indexes (tenureprom.ClusterCollector, docs/operations.md "Scrape
-- cost"): the ready index carries kind and the dead index carries priority and last_error_code
-- as INCLUDE columns, so counting ready jobs per queue, kind and priority, and dead jobs per
-- code, is an index-only scan whose cost grows with those index entries and never with
-- finished rows. Key columns and predicates are unchanged: the claim reads jobs_ready_idx in the
-- same order, and no statement writes more index entries than before (only wider ones).
-- Rebuilding takes a SHARE lock on tenure.jobs for the duration of the build (inserts and
-- claims wait): about 2 s per million ready rows on a small machine.
DROP INDEX tenure.jobs_ready_idx;
CREATE INDEX jobs_ready_idx ON tenure.jobs (queue, priority DESC, run_at, id) INCLUDE (kind) WHERE state = 'ready';
DROP INDEX tenure.jobs_dead_idx;
CREATE INDEX jobs_dead_idx ON tenure.jobs (queue, kind, id) INCLUDE (priority, last_error_code) WHERE state = 'dead';
