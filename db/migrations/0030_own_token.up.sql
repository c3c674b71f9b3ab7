-- Claim tokens without a random draw per row (migration 0030, issue 32): tenure.own draws one
-- uuid per call and derives each owned row's token from it and the row's id (the last 8 bytes
-- XORed with the id), unique within the call and, across calls, as unique as 64 random bits.
-- gen_random_uuid() per row (OpenSSL RAND_bytes) was ~4 us a row, 15 % of the claim's own
-- UPDATE at 30 rows (bench/results/2026-12-03-pgcpu.md). Body otherwise as 0025.
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
    -- The claim tokens (migration 0030): one random uuid per call, b; a row's token is b with
    -- its last 8 bytes XORed with the row's id. Within a call the ids differ, so the tokens
    -- do; two calls draw independent b, so two attempts of one job share a token only if 64
    -- random bits repeat. gen_random_uuid() per row cost ~4 us each (OpenSSL RAND_bytes), 15 %
    -- of this function's time at 30 rows (bench/results/2026-12-03-pgcpu.md). The version and
    -- variant bits of b stay for ids below 2^62.
    b  uuid   := gen_random_uuid();
    lo bigint := ('x' || right(replace(b::text, '-', ''), 16))::bit(64)::bigint;
BEGIN
    RETURN QUERY
    UPDATE tenure.jobs j
    SET state        = 'running',
        locked_by    = own.worker_id,
        lease_ms     = coalesce(nullif(own.kind_lease_ms[array_position(own.kinds, j.kind::text)], 0), j.lease_ms),
        locked_until = t + coalesce(nullif(own.kind_lease_ms[array_position(own.kinds, j.kind::text)], 0), j.lease_ms)
                               * interval '1 millisecond',
        claim_token  = encode(overlay(uuid_send(b) PLACING int8send(lo # j.id) FROM 9), 'hex')::uuid,
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
