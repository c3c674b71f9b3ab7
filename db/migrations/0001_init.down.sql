-- Reverts 0001_init: drops every object 0001_init.up.sql created in schema tenure.
-- The schema itself and tenure.schema_migrations belong to the migration runner and stay,
-- so migrating down to zero leaves an empty schema "tenure" holding only the (empty) version table.

DROP TABLE IF EXISTS tenure.audit;
DROP TABLE IF EXISTS tenure.effects;
DROP TABLE IF EXISTS tenure.jobs;          -- takes its indexes
DROP TYPE IF EXISTS tenure.job_state;
