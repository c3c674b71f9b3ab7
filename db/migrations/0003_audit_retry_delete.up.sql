-- Operators can retry (run a ready job now, or re-inject a dead or cancelled one) and delete
-- jobs; both are audited.
ALTER TABLE tenure.audit DROP CONSTRAINT audit_action;
ALTER TABLE tenure.audit ADD CONSTRAINT audit_action
    CHECK (action IN ('reinject', 'cancel', 'purge', 'prune', 'retry', 'delete'));
