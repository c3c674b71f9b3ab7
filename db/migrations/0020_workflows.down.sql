-- Reverts 0020_workflows. Jobs still waiting cannot be released in order without their
-- edges: they end cancelled (an operator may retry them). The enum value 'waiting' stays
-- (PostgreSQL cannot drop a value of an enum; 0020 adds it IF NOT EXISTS), unused.
DROP TRIGGER jobs_settle_dependents ON tenure.jobs;
UPDATE tenure.jobs SET state = 'cancelled', finished_at = now(), updated_at = now() WHERE state::text = 'waiting';
DROP FUNCTION tenure.settle_dependents();
DROP FUNCTION tenure.sequence_prev(text, text);
DROP INDEX tenure.jobs_workflow_idx;
DROP INDEX tenure.jobs_sequence_idx;
DROP TABLE tenure.job_deps;
DROP TABLE tenure.sequences;
ALTER TABLE tenure.jobs
    DROP COLUMN workflow_id,
    DROP COLUMN task_name,
    DROP COLUMN sequence_key,
    DROP COLUMN deps_pending,
    DROP COLUMN has_dependents;
DROP DOMAIN tenure.task_name;
DROP DOMAIN tenure.sequence_key;
DROP DOMAIN tenure.dep_count;

CREATE OR REPLACE FUNCTION tenure.grant_reader(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT', 'effects:SELECT', 'audit:SELECT', 'workers:SELECT', 'periodic:SELECT',
        'queues:SELECT', 'flow:SELECT', 'flow_grant:SELECT', 'flow_permit:SELECT', 'outbox:SELECT',
        'stream_effects:SELECT', 'schema_migrations:SELECT', 'kinds:SELECT'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT', 'kinds:SELECT'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_worker(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE, DELETE', 'effects:SELECT, INSERT, UPDATE, DELETE',
        'workers:SELECT, INSERT, UPDATE, DELETE', 'periodic:SELECT, INSERT, UPDATE', 'queues:SELECT',
        'flow:SELECT, INSERT, UPDATE, DELETE', 'flow_grant:SELECT, INSERT, UPDATE',
        'flow_permit:SELECT, INSERT, UPDATE, DELETE', 'outbox:SELECT, INSERT, UPDATE, DELETE',
        'stream_effects:SELECT, INSERT, UPDATE, DELETE', 'schema_migrations:SELECT',
        'kinds:SELECT, INSERT, UPDATE, DELETE'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_operator(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_reader(role)
    UNION ALL
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:UPDATE, DELETE', 'effects:DELETE', 'audit:INSERT', 'queues:INSERT, UPDATE'])
$$;
