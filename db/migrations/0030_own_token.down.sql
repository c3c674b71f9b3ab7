-- Reverts 0030_own_token: tenure.own draws a random claim token per row again (as 0025).
CREATE OR REPLACE FUNCTION tenure.own(ids bigint[], worker_id text, kinds text[], kind_lease_ms integer[],
                           limit_kinds text[] DEFAULT NULL, attempted_at timestamptz DEFAULT NULL)
    RETURNS SETOF tenure.jobs
    LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    -- The claim's clock: read once, when the claim statement has taken its snapshot, so it
    -- is later than the commit of every finish whose effect (a released task, a freed
    -- sequence or limit) the claim saw.
    t timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    UPDATE tenure.jobs j
    SET state        = 'running',
        locked_by    = own.worker_id,
        lease_ms     = coalesce(nullif(own.kind_lease_ms[array_position(own.kinds, j.kind::text)], 0), j.lease_ms),
        locked_until = t + coalesce(nullif(own.kind_lease_ms[array_position(own.kinds, j.kind::text)], 0), j.lease_ms)
                               * interval '1 millisecond',
        claim_token  = gen_random_uuid(),
        generation   = j.generation + 1,
        attempts     = j.attempts + 1,
        attempted_at = coalesce(own.attempted_at, t),
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
