-- Delete on success made visible (migration 0024): a worker publishes, with its kinds'
-- defaults, whether it deletes their succeeded jobs (worker.HandlerOptions.DeleteOnSuccess,
-- generics.KindDefaults.DeleteOnSuccess; docs/guide.md §28). Such a kind's succeeded jobs
-- leave no row, so every count read from tenure.jobs shows none of them: jobs.Client.Stats,
-- the CLI (tenure jobs stats) and the dashboard read this column to say why. Rows of workers
-- that predate it read false.
ALTER TABLE tenure.kinds ADD COLUMN delete_on_success boolean NOT NULL DEFAULT false;
