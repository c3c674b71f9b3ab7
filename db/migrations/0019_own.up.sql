-- One ownership statement (issue 28 item 1): tenure.own, the UPDATE every claim statement
-- feeds the ids it picked into.
-- tenure.own: the claim's ownership write, the system's core invariant written once
-- (docs/contract.md §1, docs/design.md "The claim path"). Every claim statement of
-- db/queries.sql picks its rows with FOR UPDATE SKIP LOCKED and passes their ids here, in the
-- same statement. For each given id whose row is still ready it sets state running, the owner,
-- the lease (kind_lease_ms: the worker's lease per kind of kinds, 0 = the job's stored
-- lease_ms), a fresh claim token, generation + 1, attempts + 1, attempted_at (attempted_at, or
-- now()) and updated_at, and returns the owned rows. A row that is not ready is left alone: a
-- running job cannot be owned twice, whatever the caller passes.
-- limit_kinds: NULL leaves the limited mark as it is; otherwise a row is marked limited (it
-- enters jobs_limited_idx) when its kind is in the list or the list holds '' (a limit covering
-- every kind); '{}' clears the mark.
-- PL/pgSQL, so the UPDATE's plan (a primary-key lookup) is prepared once per session.
CREATE FUNCTION tenure.own(ids bigint[], worker_id text, kinds text[], kind_lease_ms integer[],
                           limit_kinds text[] DEFAULT NULL, attempted_at timestamptz DEFAULT NULL)
    RETURNS SETOF tenure.jobs
    LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE tenure.jobs j
    SET state        = 'running',
        locked_by    = own.worker_id,
        lease_ms     = coalesce(nullif(own.kind_lease_ms[array_position(own.kinds, j.kind::text)], 0), j.lease_ms),
        locked_until = now() + coalesce(nullif(own.kind_lease_ms[array_position(own.kinds, j.kind::text)], 0), j.lease_ms)
                               * interval '1 millisecond',
        claim_token  = gen_random_uuid(),
        generation   = j.generation + 1,
        attempts     = j.attempts + 1,
        attempted_at = coalesce(own.attempted_at, now()),
        updated_at   = now(),
        limited      = CASE WHEN own.limit_kinds IS NULL THEN j.limited
                            ELSE '' = ANY (own.limit_kinds) OR j.kind::text = ANY (own.limit_kinds) END
    -- state compared as text: `state = 'ready'` would make jobs_ready_idx (partial, WHERE
    -- state = 'ready') a candidate path, and a generic plan made from a drained queue's
    -- statistics walks the whole ready set through it instead of looking the ids up
    -- (TestEngineStatementsPlanIndexPathsOnATinyTable; measured in bench steady: 3x the claim's
    -- time). Compared as text the check is a filter on the primary-key lookup.
    WHERE j.id = ANY (own.ids) AND j.state::text = 'ready'
    RETURNING j.*;
END
$$;
