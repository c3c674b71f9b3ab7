-- A workflow's id is unique in tenure.workflows, written once when the workflow is inserted
-- (migration 0031, issue 30), instead of in the index every task's row version enters.
--
-- Until now the unique index jobs_workflow_idx (workflow_id, task_name) made a workflow's id
-- and task names unique. A unique index checks each new entry against the entries of the same
-- key, and every non-HOT version of a task (its release, claim and finish) adds one, so each
-- state change of a task visited its earlier versions: measured on a 30-row claim-like UPDATE,
-- 446 shared buffers with the unique index, 329 with it non-unique, 213 without
-- (bench/results/2026-12-04-workflow-settle.md). Task names are unique within a workflow by
-- construction (jobs.Workflow refuses a duplicate name before anything is sent); what the index
-- also refused was inserting a workflow whose id is taken (a caller-chosen WorkflowOpts.ID
-- inserted twice). tenure.workflows keeps that guarantee at one row per workflow: the insert's
-- first statement writes it (InsertFlowJobs), a taken id fails it with a unique violation on
-- workflows_pkey (jobs.ErrWorkflowExists), and nothing of the workflow is inserted.
-- jobs_workflow_idx stays, non-unique, for the reads by workflow (its tasks, a dependency's
-- output by name, cancel, the dashboard).
--
-- The retention pruning deletes the rows of workflows with no task left
-- (PruneWorkflowsBatch); an id is free again once its workflow is pruned. grant_reader gains
-- SELECT, grant_enqueuer INSERT and grant_worker SELECT and DELETE on the table (run them again
-- for existing roles).
--
-- The index is rebuilt (a scan of tenure.jobs under the migration's lock); existing workflows
-- get their row from their tasks.
CREATE TABLE tenure.workflows (
    id         uuid        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO tenure.workflows (id, created_at)
SELECT j.workflow_id, min(j.created_at) FROM tenure.jobs j
WHERE j.workflow_id IS NOT NULL
GROUP BY j.workflow_id;

DROP INDEX tenure.jobs_workflow_idx;
CREATE INDEX jobs_workflow_idx ON tenure.jobs (workflow_id, task_name) WHERE workflow_id IS NOT NULL;

CREATE OR REPLACE FUNCTION tenure.grant_reader(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT', 'effects:SELECT', 'audit:SELECT', 'workers:SELECT', 'periodic:SELECT',
        'queues:SELECT', 'flow:SELECT', 'flow_grant:SELECT', 'flow_permit:SELECT', 'outbox:SELECT',
        'stream_effects:SELECT', 'schema_migrations:SELECT', 'kinds:SELECT', 'job_deps:SELECT',
        'sequences:SELECT', 'job_dep_stripes:SELECT', 'workflows:SELECT'])
$$;

CREATE OR REPLACE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE (has_dependents)', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT',
        'kinds:SELECT', 'job_deps:SELECT, INSERT', 'sequences:SELECT, INSERT, UPDATE',
        'job_dep_stripes:SELECT, INSERT', 'workflows:SELECT, INSERT'])
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
        'sequences:SELECT, UPDATE, DELETE', 'job_dep_stripes:SELECT, UPDATE, DELETE',
        'workflows:SELECT, DELETE'])
$$;
