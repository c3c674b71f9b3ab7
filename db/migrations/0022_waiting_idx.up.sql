-- Jobs waiting on dependencies (migration 0020), by queue, kind and age: the cluster metrics
-- (tenureprom: tenure_queue_waiting_jobs, tenure_queue_oldest_waiting_age_seconds) and the
-- dashboard count them from this index alone, never from the finished rows. Only waiting rows
-- enter it (a handful per workflow in flight); a release leaves it (the row's state changes).
CREATE INDEX jobs_waiting_idx ON tenure.jobs (queue, kind, created_at) WHERE state = 'waiting';
