-- Reverts 0024_kinds_delete_on_success.
ALTER TABLE tenure.kinds DROP COLUMN delete_on_success;
