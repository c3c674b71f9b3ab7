-- Reverts 0006_periodic_pause. Audit rows of pause/resume actions are deleted: the restored
-- constraint does not allow them.
DELETE FROM tenure.audit WHERE action IN ('pause', 'resume');
ALTER TABLE tenure.audit DROP CONSTRAINT audit_action;
ALTER TABLE tenure.audit ADD CONSTRAINT audit_action
    CHECK (action IN ('reinject', 'cancel', 'purge', 'prune', 'retry', 'delete'));
DROP TABLE IF EXISTS tenure.queues;
DROP TABLE IF EXISTS tenure.periodic;
