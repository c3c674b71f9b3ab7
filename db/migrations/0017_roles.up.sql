-- Roles as code (migration 0017, issue 29 item 11): tenure.grant_reader, grant_enqueuer, grant_worker,
-- grant_operator grant a role what one surface needs (docs/guide.md §10).
--
-- Roles as code (issue 29, item 11): one function per surface grants a role exactly what that
-- surface's statements need (db/queries.sql), on every table of schema tenure it touches. Run
-- them as the owner of schema tenure (the role that runs the migrations), after `tenure migrate
-- up` and again after every upgrade: a migration that adds a table adds it to the functions, and
-- worker.Start refuses (worker.ErrPermission) a role that lacks what its configuration needs. Each
-- returns the GRANT statements it ran. They only grant (REVOKE by hand); a role may take several.
--   grant_reader:   SELECT on every table (dashboard read-only, `tenure serve`, tenureprom,
--                   jobs.Client reads).
--   grant_enqueuer: insert jobs (jobs.Client Insert*, tenure.enqueue, unique inserts) and
--                   outbox messages (tenurenats.Publish); read them back.
--   grant_worker:   the worker engine (claims of every kind, limits, permits, finishes, heartbeats,
--                   reclaim, pruning, effects, periodic, pause, registry) and tenurenats (relay,
--                   JetStream workers' ledger, outbox pruning). No privilege on tenure.audit.
--   grant_operator: grant_reader plus the audited operator actions (jobs.Client Cancel, Retry,
--                   Reinject, Delete, Purge, Prune, PauseQueue/ResumeQueue; dashboard actions,
--                   the CLI). The only surface that may INSERT into tenure.audit.
-- No surface may UPDATE or DELETE tenure.audit, or write tenure.schema_migrations.
CREATE FUNCTION tenure.grant_privileges(role name, grants text[]) RETURNS SETOF text
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    g    text;
    tbl  text;
    stmt text;
    -- The schema these functions live in, named through an identifier (not a literal), so the
    -- text migrated into another schema (Tenure's rewriting runner) grants on that one.
    sch  name := (SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
                  WHERE t.oid = pg_typeof(NULL::tenure.jobs));
BEGIN
    IF role IS NULL THEN
        RAISE EXCEPTION 'tenure: grant: role must not be NULL' USING ERRCODE = '22004';
    END IF;
    stmt := format('GRANT USAGE ON SCHEMA %I TO %I', sch, role);
    EXECUTE stmt;
    RETURN NEXT stmt;
    -- each entry is 'table:PRIVILEGES'
    FOREACH g IN ARRAY grants LOOP
        tbl := split_part(g, ':', 1);
        IF to_regclass(format('%I.%I', sch, tbl)) IS NULL THEN
            CONTINUE; -- schema_migrations before the runner created it (a schema.sql-only database)
        END IF;
        stmt := format('GRANT %s ON %I.%I TO %I', split_part(g, ':', 2), sch, tbl, role);
        EXECUTE stmt;
        RETURN NEXT stmt;
    END LOOP;
END
$$;

CREATE FUNCTION tenure.grant_reader(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT', 'effects:SELECT', 'audit:SELECT', 'workers:SELECT', 'periodic:SELECT',
        'queues:SELECT', 'flow:SELECT', 'flow_grant:SELECT', 'flow_permit:SELECT', 'outbox:SELECT',
        'stream_effects:SELECT', 'schema_migrations:SELECT'])
$$;

CREATE FUNCTION tenure.grant_enqueuer(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT', 'outbox:SELECT, INSERT', 'schema_migrations:SELECT'])
$$;

CREATE FUNCTION tenure.grant_worker(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:SELECT, INSERT, UPDATE, DELETE', 'effects:SELECT, INSERT, UPDATE, DELETE',
        'workers:SELECT, INSERT, UPDATE, DELETE', 'periodic:SELECT, INSERT, UPDATE', 'queues:SELECT',
        'flow:SELECT, INSERT, UPDATE, DELETE', 'flow_grant:SELECT, INSERT, UPDATE',
        'flow_permit:SELECT, INSERT, UPDATE, DELETE', 'outbox:SELECT, INSERT, UPDATE, DELETE',
        'stream_effects:SELECT, INSERT, UPDATE, DELETE', 'schema_migrations:SELECT'])
$$;

CREATE FUNCTION tenure.grant_operator(role name) RETURNS SETOF text
    LANGUAGE sql VOLATILE
AS $$
    SELECT tenure.grant_reader(role)
    UNION ALL
    SELECT tenure.grant_privileges(role, ARRAY[
        'jobs:UPDATE, DELETE', 'effects:DELETE', 'audit:INSERT', 'queues:INSERT, UPDATE'])
$$;

REVOKE EXECUTE ON FUNCTION tenure.grant_privileges(name, text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION tenure.grant_reader(name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION tenure.grant_enqueuer(name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION tenure.grant_worker(name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION tenure.grant_operator(name) FROM PUBLIC;
