-- Reverts 0027_jobs_fillfactor: inserts fill the pages of tenure.jobs again.
ALTER TABLE tenure.jobs RESET (fillfactor);
