-- Reverts 0002_workers.
DROP TABLE IF EXISTS tenure.workers;
