-- Reverts 0012_fair_share.
DROP FUNCTION IF EXISTS tenure.fair_keys(text, smallint, text, integer, text[], bigint[]);
DROP INDEX IF EXISTS tenure.jobs_fair_idx;
