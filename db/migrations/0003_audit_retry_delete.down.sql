-- Back to the four actions of 0001. Audit rows of retries and deletes are kept (the audit
-- trail is never rewritten), so the restored constraint is NOT VALID: it holds for new rows.
ALTER TABLE tenure.audit DROP CONSTRAINT audit_action;
ALTER TABLE tenure.audit ADD CONSTRAINT audit_action
    CHECK (action IN ('reinject', 'cancel', 'purge', 'prune')) NOT VALID;
