-- Reverts 0031_workflows: the workflow ids are unique in jobs_workflow_idx again, and
-- tenure.workflows is dropped. Fails (and changes nothing) if two workflows share an id and a
-- task name, which 0031 allows once a pruned workflow's id is reused.
DROP INDEX tenure.jobs_workflow_idx;
CREATE UNIQUE INDEX jobs_workflow_idx ON tenure.jobs (workflow_id, task_name) WHERE workflow_id IS NOT NULL;

DROP TABLE tenure.workflows;

CREATE OR REPLACE FUNCTION tenure.grant_reader(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT', 'effects:SELECT', 'audit:SELECT', 'workers:SELECT', 'periodic:SELECT',
        'queues:SELECT', 'flow:SELECT', 'flow_grant:SELECT', 'flow_permit:SELECT', 'outbox:SELECT',
        'stream_effects:SELECT', 'schema_migrations:SELECT', 'kinds:SELECT', 'job_deps:SELECT',
        'sequences:SELECT', 'job_dep_stripes:SELECT'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE (has_dependents)', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT',
        'kinds:SELECT', 'job_deps:SELECT, INSERT', 'sequences:SELECT, INSERT, UPDATE',
        'job_dep_stripes:SELECT, INSERT'])
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
        'kinds:SELECT, INSERT, UPDATE, DELETE', 'job_deps:SELECT, UPDATE, DELETE',
        'sequences:SELECT, UPDATE, DELETE', 'job_dep_stripes:SELECT, UPDATE, DELETE'])
$$;
