-- Every statement Tenure runs. sqlc generates db/gen from this file; `make check-generated`
-- fails when db/gen is stale. Fenced statements carry id + state='running' + claim_token in
-- their WHERE clause and return the rows they changed, so callers can count them.

-- ---------------------------------------------------------------------------------------------
-- Enqueue
-- ---------------------------------------------------------------------------------------------

-- name: InsertJob :one
-- One job. When notify is true the statement also sends the new-job signal for its queue: a
-- NOTIFY inside the inserting transaction, delivered only on commit, whose payload is
-- "queue<US>priority<US>run_at_us" (US = the unit separator, chr(31)): workers wake, and start
-- the band's next claim at that due time if it lies behind the band's watermark (a transaction
-- that commits after newer jobs were claimed; worker/claim.go, "Watermarks"). (The sub-select
-- runs once, as an InitPlan, and sends nothing when no row was inserted.)
-- A unique job (is_unique) carries the key tenure.unique_key computes (once, in k, on the
-- database clock) and the states that hold it. ON CONFLICT names jobs_unique_idx's predicate,
-- so the database refuses a second holder of the key, race-free; the second branch then
-- returns the holder with duplicate = true. When the holder committed after this statement's
-- snapshot (it is invisible here, though the INSERT waited for it) or left its unique states
-- meanwhile, no row comes back and the caller runs the statement again.
WITH k AS (
    SELECT CASE WHEN sqlc.arg(is_unique)::boolean
                THEN tenure.unique_key(@kind::text, sqlc.narg(unique_queue)::text, @payload::jsonb,
                                       sqlc.arg(unique_by_args)::boolean, sqlc.arg(unique_fields)::text[],
                                       sqlc.arg(unique_period_ms)::bigint) END AS key
), ins AS (
    INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata,
                             tags, unique_key, unique_states)
    VALUES (@queue::text, @kind, @payload, @payload_version::integer, @priority::smallint,
            coalesce(sqlc.narg(run_at)::timestamptz, now() + sqlc.arg(delay_us)::bigint * interval '1 microsecond'),
            @max_attempts::integer, @lease_ms::integer, @metadata::jsonb, @tags::text[], (SELECT key FROM k), sqlc.narg(unique_states)::smallint)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND tenure.unique_state_held(unique_states, state)
    DO NOTHING
    RETURNING *
)
SELECT ins.*, false AS duplicate FROM ins
WHERE (SELECT count(*) FROM (SELECT pg_notify('tenure_jobs', i.queue || chr(31) || i.priority || chr(31)
                                              || (extract(epoch FROM i.run_at) * 1000000)::bigint)
                             FROM ins i WHERE sqlc.arg(notify)::boolean) n) >= 0
UNION ALL
SELECT h.*, true AS duplicate FROM tenure.jobs h
WHERE NOT EXISTS (SELECT 1 FROM ins)
  AND h.unique_key = (SELECT key FROM k) AND h.unique_key IS NOT NULL
  AND tenure.unique_state_held(h.unique_states, h.state);

-- name: InsertPlainJob :one
-- InsertJob for a job without a unique key: a plain INSERT, without the arbiter check and
-- speculative insertion that ON CONFLICT costs every row it inserts, and without the holder
-- branch. Same columns, same new-job signal.
WITH ins AS (
    INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata, tags)
    VALUES (@queue::text, @kind::text, @payload::jsonb, @payload_version::integer, @priority::smallint,
            coalesce(sqlc.narg(run_at)::timestamptz, now() + sqlc.arg(delay_us)::bigint * interval '1 microsecond'),
            @max_attempts::integer, @lease_ms::integer, @metadata::jsonb, @tags::text[])
    RETURNING *
)
SELECT ins.* FROM ins
WHERE (SELECT count(*) FROM (SELECT pg_notify('tenure_jobs', i.queue || chr(31) || i.priority || chr(31)
                                              || (extract(epoch FROM i.run_at) * 1000000)::bigint)
                             FROM ins i WHERE sqlc.arg(notify)::boolean) n) >= 0;

-- name: InsertJobs :many
-- Many jobs in one round trip, plus the new-job signal (as InsertJob's) for each queue in
-- notify_queues (the queues given jobs that are due now) and priority band with due jobs,
-- carrying the band's oldest due time; sent inside the inserting transaction.
-- run_at_us is an absolute time in microseconds since the Unix
-- epoch; 0 means "now + delay_us" on the database clock.
-- tags holds each job's tags as a JSON array of strings. Returns the inserted rows in id order
-- (the input order).
WITH ins AS (
INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata, tags)
SELECT i.queue, i.kind, i.payload, i.payload_version, i.priority,
       CASE WHEN i.run_at_us <> 0 THEN 'epoch'::timestamptz + i.run_at_us * interval '1 microsecond'
            ELSE now() + i.delay_us * interval '1 microsecond' END,
       i.max_attempts, i.lease_ms, i.metadata, CASE WHEN i.tags = '[]'::jsonb THEN '{}'::text[] ELSE ARRAY(SELECT jsonb_array_elements_text(i.tags)) END
FROM (SELECT unnest(@queues::text[]) AS queue,
            unnest(@kinds::text[]) AS kind,
            unnest(@payloads::jsonb[]) AS payload,
            unnest(@payload_versions::integer[]) AS payload_version,
            unnest(@priorities::smallint[]) AS priority,
            unnest(@run_at_us::bigint[]) AS run_at_us,
            unnest(@delay_us::bigint[]) AS delay_us,
            unnest(@max_attempts::integer[]) AS max_attempts,
            unnest(@lease_ms::integer[]) AS lease_ms,
            unnest(@metadata::jsonb[]) AS metadata,
            unnest(@tags::jsonb[]) AS tags) AS i
RETURNING *
)
SELECT ins.* FROM ins
WHERE (SELECT count(*) FROM (SELECT pg_notify('tenure_jobs', d.queue || chr(31) || d.priority || chr(31)
                                              || (extract(epoch FROM d.run_at) * 1000000)::bigint)
                             FROM (SELECT queue, priority, min(run_at) AS run_at FROM ins
                                   WHERE queue = ANY(@notify_queues::text[]) AND run_at <= now()
                                   GROUP BY queue, priority) d) n) >= 0
ORDER BY id;

-- name: InsertUniqueJobs :many
-- InsertJobs for unique jobs: one row per input ord. Keys are computed once per row (i is
-- materialized). Rows are inserted in ord order with ON CONFLICT DO NOTHING on
-- jobs_unique_idx, so of several rows with one key (in this batch or already stored) only the
-- first is inserted. Returns one row per input (ord >= 0) with its key and the id of the
-- holder visible to the statement's snapshot (0 if none), then one row per inserted job
-- (ord -1) with its key and id; the caller matches them by key (a join here would be planned
-- for 10-row arrays by the generic plan). An input whose key was neither inserted nor held
-- lost a race with a transaction that committed after the snapshot, or whose holder just
-- left its unique states: the caller inserts it again.
-- unique_fields holds each row's field names as a JSON array (empty: all fields).
WITH i AS (
    SELECT s.*, tenure.unique_key(s.kind, CASE WHEN s.by_queue THEN s.queue END, s.payload, s.by_args,
                                  ARRAY(SELECT jsonb_array_elements_text(s.fields)), s.period_ms) AS ukey
    FROM (SELECT unnest(@ords::integer[]) AS ord,
                 unnest(@queues::text[]) AS queue,
                 unnest(@kinds::text[]) AS kind,
                 unnest(@payloads::jsonb[]) AS payload,
                 unnest(@payload_versions::integer[]) AS payload_version,
                 unnest(@priorities::smallint[]) AS priority,
                 unnest(@run_at_us::bigint[]) AS run_at_us,
                 unnest(@delay_us::bigint[]) AS delay_us,
                 unnest(@max_attempts::integer[]) AS max_attempts,
                 unnest(@lease_ms::integer[]) AS lease_ms,
                 unnest(@metadata::jsonb[]) AS metadata,
                 unnest(@tags::jsonb[]) AS tags,
                 unnest(@unique_states::smallint[]) AS ustates,
                 unnest(@unique_by_queue::boolean[]) AS by_queue,
                 unnest(@unique_by_args::boolean[]) AS by_args,
                 unnest(@unique_fields::jsonb[]) AS fields,
                 unnest(@unique_period_ms::bigint[]) AS period_ms) AS s
), ins AS (
    INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata,
                             tags, unique_key, unique_states)
    SELECT i.queue, i.kind, i.payload, i.payload_version, i.priority,
           CASE WHEN i.run_at_us <> 0 THEN 'epoch'::timestamptz + i.run_at_us * interval '1 microsecond'
                ELSE now() + i.delay_us * interval '1 microsecond' END,
           i.max_attempts, i.lease_ms, i.metadata, CASE WHEN i.tags = '[]'::jsonb THEN '{}'::text[] ELSE ARRAY(SELECT jsonb_array_elements_text(i.tags)) END, i.ukey, i.ustates
    FROM i ORDER BY i.ord
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND tenure.unique_state_held(unique_states, state)
    DO NOTHING
    RETURNING id, unique_key, queue, priority, run_at
)
SELECT i.ord::integer AS ord, i.ukey::bytea AS unique_key,
       coalesce((SELECT h.id FROM tenure.jobs h
                 WHERE h.unique_key = i.ukey AND h.unique_key IS NOT NULL
                   AND tenure.unique_state_held(h.unique_states, h.state)), 0)::bigint AS id
FROM i
WHERE (SELECT count(*) FROM (SELECT pg_notify('tenure_jobs', d.queue || chr(31) || d.priority || chr(31)
                                              || (extract(epoch FROM d.run_at) * 1000000)::bigint)
                             FROM (SELECT queue, priority, min(run_at) AS run_at FROM ins
                                   WHERE queue = ANY(@notify_queues::text[]) AND run_at <= now()
                                   GROUP BY queue, priority) d) n) >= 0
UNION ALL
SELECT -1, n.unique_key, n.id FROM ins n;

-- name: FindJobs :many
-- The jobs of a kind, filtered by queue, priority and state when given, in id order
-- (package tenuretest).
SELECT * FROM tenure.jobs
WHERE kind = @kind::text
  AND (@queue::text = '' OR queue = @queue::text)
  AND (@priority::integer = 0 OR priority = @priority::integer)
  AND (@state::text = '' OR state::text = @state::text)
ORDER BY id;

-- name: GetJobs :many
-- The rows of the given jobs, in id order: InsertUniqueJobs's inserted jobs and holders, read
-- in the inserting transaction.
SELECT * FROM tenure.jobs WHERE id = ANY(@ids::bigint[]) ORDER BY id;

-- ---------------------------------------------------------------------------------------------
-- Claim (docs/contract.md §1): one statement, one short transaction. The CTE picks with
-- FOR UPDATE SKIP LOCKED through jobs_ready_idx and passes the ids to tenure.own (migration
-- 0019), the one ownership statement: it commits ownership (state, owner, lease from the
-- database clock, a fresh claim token, generation+1, attempts+1) of the rows still ready, by
-- primary key (ARRAY(...) of ids, whatever the planner guesses for LIMIT: joining the CTE
-- instead lets a generic plan, which assumes a large LIMIT, hash-join against a sequential scan
-- of the whole table). Every claim statement returns the same columns (worker/claim.go,
-- claimRow): the owned rows' job columns and feedback, a JSON object of what the mode learnt
-- (NULL for ClaimStrict, ClaimOrdered, ClaimOrderedMany), on every row; when nothing was owned,
-- one row of NULL job columns carrying the feedback.
-- A worker claims only what it can run: kinds/kind_versions list its registered kinds and the
-- newest payload version each knows, so a job of an unknown kind (array_position is NULL) or of
-- a newer version (a rolling deploy) is skipped, never claimed and failed. kind_lease_ms is the
-- lease the worker declares per kind (0 = the job's stored lease_ms); it is written to the row so
-- heartbeats and the reclaim sweep use the lease of the worker that runs the attempt.
-- ---------------------------------------------------------------------------------------------

-- name: ClaimStrict :many
-- Strict priority in one index scan: the simplest claim, for tools and tests. The engine does
-- not use it: run_at cannot bound a scan that crosses priority bands, so it walks every
-- future-dated entry of the higher bands (retries in backoff, scheduled jobs) before reaching
-- what is due. The engine claims with ClaimOrdered (one equality segment per band) instead.
WITH picked AS (
    SELECT r.id FROM tenure.jobs r
    WHERE r.state = 'ready' AND r.queue = @queue AND r.run_at <= now()
      AND r.payload_version <= (@kind_versions::integer[])[array_position(@kinds::text[], r.kind)]
    ORDER BY r.priority DESC, r.run_at, r.id
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
), owned AS MATERIALIZED (
    SELECT o.* FROM tenure.own(ARRAY(SELECT id FROM picked), @worker_id::text, @kinds::text[], @kind_lease_ms::integer[]) o
)
SELECT u.id, u.queue, u.kind, u.payload, u.payload_version, u.priority, u.run_at,
       u.attempts, u.max_attempts, u.lease_ms, u.locked_until, u.claim_token, u.generation,
       u.attempted_at, u.created_at, u.metadata, u.tags, u.snoozes, f.feedback
FROM (SELECT NULL::jsonb AS feedback) f LEFT JOIN owned u ON true;

-- name: ClaimOrdered :many
-- The engine's claim of a queue without limits or fair share, for every priority policy
-- (worker/internal/engine/claimmode.go, orderedMode). The fairness policy
-- (worker/internal/engine/fairness.go) lists segments in serving order (rank ascending): a
-- priority band (an equality, so the run_at bounds position the index scan), a lower bound on
-- run_at (the band's watermark: everything older was claimed already, so the scan starts past
-- the index entries those claims left behind, which only VACUUM removes), an age window on the
-- database clock, a LIMIT, a rank and the band's quota.
-- 1. cand: each segment read oldest-first through jobs_ready_idx up to its limit, locked as it
--    is read (FOR UPDATE SKIP LOCKED); the nested loop runs the segments in the given order and
--    stops at @scan rows.
-- 2. picked: the candidates in rank order, a band's first `quota` (by rank, run_at) ahead of
--    every band's overflow, so unused share flows to the others; the first @batch are claimed.
-- Ordered policies (strict priority, aging) pass scan = batch (each limit = batch, each quota =
-- batch, ranks growing in serving order): the loop stops as soon as the batch is full, so no
-- row is locked that is not claimed, and picked is every candidate. Ranked policies (quotas, a
-- deadline) pass scan = the sum of the limits: every segment's candidates are read and locked
-- for the statement's moment, and picked ranks them (deadline segments, rank 0, oldest first
-- across bands and ahead of every quota).
WITH seg AS (
    SELECT * FROM (SELECT unnest(@seg_priority::smallint[]) AS priority,
            unnest(@seg_after_us::bigint[]) AS after_us,
            unnest(@seg_min_age_us::bigint[]) AS min_age_us,
            unnest(@seg_max_age_us::bigint[]) AS max_age_us,
            unnest(@seg_limit::integer[]) AS lim,
            unnest(@seg_rank::integer[]) AS rank,
            unnest(@seg_quota::integer[]) AS quota) AS s
), cand AS (
    SELECT c.id, c.run_at, s.priority AS band, s.rank, s.quota
    FROM seg s
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at FROM tenure.jobs j
        WHERE j.state = 'ready' AND j.queue = @queue AND j.priority = s.priority
          AND j.run_at >= 'epoch'::timestamptz + s.after_us * interval '1 microsecond'
          AND j.run_at <= now() - s.min_age_us * interval '1 microsecond'
          AND j.run_at >  now() - s.max_age_us * interval '1 microsecond'
          AND j.payload_version <= (@kind_versions::integer[])[array_position(@kinds::text[], j.kind)]
        ORDER BY j.run_at, j.id
        LIMIT s.lim
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT @scan
), ranked AS (
    SELECT id, run_at, rank, quota,
           row_number() OVER (PARTITION BY band ORDER BY rank, run_at, id) AS band_rn
    FROM cand
), picked AS (
    SELECT id FROM ranked
    ORDER BY (rank > 0 AND band_rn > quota), rank, run_at, id
    LIMIT @batch
), owned AS MATERIALIZED (
    SELECT o.* FROM tenure.own(ARRAY(SELECT id FROM picked), @worker_id::text, @kinds::text[], @kind_lease_ms::integer[]) o
)
SELECT u.id, u.queue, u.kind, u.payload, u.payload_version, u.priority, u.run_at,
       u.attempts, u.max_attempts, u.lease_ms, u.locked_until, u.claim_token, u.generation,
       u.attempted_at, u.created_at, u.metadata, u.tags, u.snoozes, f.feedback
FROM (SELECT NULL::jsonb AS feedback) f LEFT JOIN owned u ON true;

-- name: ClaimOrderedMany :many
-- ClaimOrdered for many queues in one statement (worker/claimbatch.go: the worker's claim
-- batcher gathers the plain ordered claims its queue loops plan). Request i (1-based) claims at
-- most req_batch[i] jobs of queue req_queue[i] through its segments seg_*[req_seg_lo[i] ..
-- req_seg_hi[i]], served in order exactly as ClaimOrdered serves its own: each segment read
-- oldest-first through jobs_ready_idx, the nested loop stopping as soon as the request's batch
-- is full, so no row is locked that is not claimed. Each request unnests its own slice of the
-- segment arrays, so the statement reads each request's segments once, whatever the number of
-- requests. The ownership statement (tenure.own) takes every picked id; the rows come back in
-- the one claim row shape (feedback NULL), and the batcher gives each to the request of its
-- queue (one per statement, below).
-- A statement must not carry two requests of one queue: its own row locks do not make it skip
-- rows (SKIP LOCKED skips other transactions' locks only), so both would pick the same jobs.
-- The batcher sends at most one request per queue in a statement.
-- The queues are read with unnest (subscripting a text array walks it to the element: reading
-- request i's queue by subscript was quadratic in the requests); the integer arrays are
-- subscripted (fixed width: direct).
WITH req AS (
    SELECT u.queue, (@req_batch::integer[])[u.i] AS batch,
           (@req_seg_lo::integer[])[u.i] AS seg_lo, (@req_seg_hi::integer[])[u.i] AS seg_hi
    FROM unnest(@req_queue::text[]) WITH ORDINALITY AS u(queue, i)
), picked AS (
    SELECT p.id
    FROM req r
    CROSS JOIN LATERAL (
        SELECT c.id
        FROM (SELECT unnest((@seg_priority::smallint[])[r.seg_lo:r.seg_hi]) AS priority,
                unnest((@seg_after_us::bigint[])[r.seg_lo:r.seg_hi]) AS after_us,
                unnest((@seg_min_age_us::bigint[])[r.seg_lo:r.seg_hi]) AS min_age_us,
                unnest((@seg_max_age_us::bigint[])[r.seg_lo:r.seg_hi]) AS max_age_us) AS s
        CROSS JOIN LATERAL (
            SELECT j.id FROM tenure.jobs j
            WHERE j.state = 'ready' AND j.queue = r.queue AND j.priority = s.priority
              AND j.run_at >= 'epoch'::timestamptz + s.after_us * interval '1 microsecond'
              AND j.run_at <= now() - s.min_age_us * interval '1 microsecond'
              AND j.run_at >  now() - s.max_age_us * interval '1 microsecond'
              AND j.payload_version <= (@kind_versions::integer[])[array_position(@kinds::text[], j.kind)]
            ORDER BY j.run_at, j.id
            LIMIT r.batch
            FOR UPDATE SKIP LOCKED
        ) c
        LIMIT r.batch
    ) p
), owned AS MATERIALIZED (
    SELECT o.* FROM tenure.own(ARRAY(SELECT id FROM picked), @worker_id::text, @kinds::text[], @kind_lease_ms::integer[]) o
)
SELECT u.id, u.queue, u.kind, u.payload, u.payload_version, u.priority, u.run_at,
       u.attempts, u.max_attempts, u.lease_ms, u.locked_until, u.claim_token, u.generation,
       u.attempted_at, u.created_at, u.metadata, u.tags, u.snoozes, f.feedback
FROM (SELECT NULL::jsonb AS feedback) f LEFT JOIN owned u ON true;

-- name: ClaimFair :many
-- Fair share (worker/fairshare.go): the claim of a queue with Fairness.FairShare, for every
-- priority policy. Within each segment (a priority band and an age window, as in
-- ClaimOrdered) the tenants (metadata "tenure.fair_key") with ready jobs are served round
-- robin: every tenant's first job, then every tenant's second, ... so one tenant's backlog
-- cannot starve another. Jobs without a key form one more participant, served oldest first.
-- Watermarks, as in ClaimOrdered, keep each read past the index entries earlier claims left
-- behind: known_* give each tenant the engine claimed from its watermark (every ready job of
-- the tenant due before it was claimed), seg_after_us the keyless jobs' (0 = from the start).
-- 1. tenant: per band, up to @batch keys with ready jobs, from tenure.fair_keys (a skip scan of
--    jobs_fair_idx), in rotation order: the keys after the band's cursor (the last key the
--    previous claim served), then from the first key up to the cursor.
-- 2. kscan: the segment's first ready jobs from the keyless watermark (jobs_ready_idx), a
--    share of the batch (batch/(keys+1)+1); the keyless ones among them are candidates, locked
--    (skipping rows another claim holds) — the keyed ones it read are not. cand: per segment
--    and tenant, its oldest jobs from its watermark through jobs_fair_idx, a share of the batch
--    each (the keyless jobs, if any, count as one more participant), locked as they are read,
--    skipping rows other claims hold (so concurrent claims of one tenant take consecutive
--    rows instead of colliding on the same ones). A claim locks at most tenants rows it does
--    not claim (the shares' rounding), released when it commits.
-- 3. more: when the shares leave the batch short (light tenants), the tenants that had more
--    give up to the shortfall each, ranked after every share: their next rows that cand did not
--    take. (Not "OFFSET share": a row another claim held while cand read and released before
--    more read it would shift the offset back over rows cand took, and return those twice.)
-- 4. ranked: the policy's rank and quotas as in ClaimOrdered, and within them the round:
--    (n-th job of its tenant, tenant's rotation position).
-- 5. picked: the first @batch in that order.
-- The result is the claimed rows, each with feedback: its tenant's position and round
-- (fair_pos, fair_round, from which the engine moves the band's cursor) and the per-band
-- keyless watermarks (keyless_band, keyless_upto_us): how far kscan read when every keyless
-- job it read was claimed, else the newest keyless job claimed. When nothing was claimed the
-- one row of NULLs carries only the watermarks.
WITH seg AS (
    SELECT * FROM (SELECT unnest(@seg_priority::smallint[]) AS priority,
            unnest(@seg_after_us::bigint[]) AS after_us,
            unnest(@seg_min_age_us::bigint[]) AS min_age_us,
            unnest(@seg_max_age_us::bigint[]) AS max_age_us,
            unnest(@seg_rank::integer[]) AS rank,
            unnest(@seg_quota::integer[]) AS quota,
            generate_subscripts(@seg_priority::smallint[], 1) AS ord,
            @batch::integer AS batch) AS s
), known AS (
    SELECT unnest(@known_priority::smallint[]) AS priority, unnest(@known_key::text[]) AS key,
           unnest(@known_after_us::bigint[]) AS after_us
), band AS (
    SELECT b.priority, coalesce(c.key, '') AS after_key
    FROM (SELECT DISTINCT seg.priority FROM seg) b
    LEFT JOIN (SELECT unnest(@cursor_priority::smallint[]) AS priority,
                      unnest(@cursor_key::text[]) AS key) c ON c.priority = b.priority
), tenant AS MATERIALIZED (
    SELECT b.priority, k.key, k.pos::integer AS pos, count(*) OVER (PARTITION BY b.priority) AS keys,
           coalesce(w.after_us, 0) AS after_us
    FROM band b
    CROSS JOIN LATERAL tenure.fair_keys(@queue, b.priority, b.after_key, @batch::integer,
        ARRAY(SELECT kk.key FROM known kk WHERE kk.priority = b.priority ORDER BY kk.key),
        ARRAY(SELECT kk.after_us FROM known kk WHERE kk.priority = b.priority ORDER BY kk.key))
        WITH ORDINALITY AS k(key, pos)
    LEFT JOIN known w ON w.priority = b.priority AND w.key = k.key
), kscan AS MATERIALIZED (
    SELECT s.ord, s.priority, s.rank, s.quota, x.id, x.run_at,
           (x.metadata ->> 'tenure.fair_key') IS NULL
             AND x.payload_version <= (@kind_versions::integer[])[array_position(@kinds::text[], x.kind)] AS keyless
    FROM seg s
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at, j.kind, j.payload_version, j.metadata FROM tenure.jobs j
        WHERE j.state = 'ready' AND j.queue = @queue AND j.priority = s.priority
          AND j.run_at >= 'epoch'::timestamptz + s.after_us * interval '1 microsecond'
          AND j.run_at <= now() - s.min_age_us * interval '1 microsecond'
          AND j.run_at >  now() - s.max_age_us * interval '1 microsecond'
        ORDER BY j.run_at, j.id
        LIMIT (SELECT s.batch / (count(*)::integer + 1) + 1 FROM tenant WHERE tenant.priority = s.priority)
    ) x
), share AS MATERIALIZED (
    SELECT s.ord, s.priority, s.rank, s.quota, s.min_age_us, s.max_age_us, s.batch, t.key, t.pos, t.after_us,
           (s.batch + t.keys::integer - 1 + k.n) / (t.keys::integer + k.n) AS per
    FROM seg s JOIN tenant t ON t.priority = s.priority
    CROSS JOIN LATERAL (SELECT (EXISTS (SELECT 1 FROM kscan WHERE kscan.ord = s.ord AND kscan.keyless))::integer AS n) k
), cand AS MATERIALIZED (
    SELECT h.ord, h.priority AS band, h.rank, h.quota, h.pos, c.id, c.run_at
    FROM share h
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at FROM tenure.jobs j
        WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL
          AND j.queue = @queue AND j.priority = h.priority AND (j.metadata ->> 'tenure.fair_key') = h.key
          AND j.run_at >= 'epoch'::timestamptz + h.after_us * interval '1 microsecond'
          AND j.run_at <= now() - h.min_age_us * interval '1 microsecond'
          AND j.run_at >  now() - h.max_age_us * interval '1 microsecond'
          AND j.payload_version <= (@kind_versions::integer[])[array_position(@kinds::text[], j.kind)]
        ORDER BY j.run_at, j.id
        LIMIT h.per
        FOR UPDATE SKIP LOCKED
    ) c
    UNION ALL
    SELECT k.ord, k.priority, k.rank, k.quota, 0, k.id, k.run_at
    FROM kscan k
    CROSS JOIN LATERAL (
        SELECT j.id FROM tenure.jobs j WHERE j.id = k.id AND j.state = 'ready'
        FOR UPDATE SKIP LOCKED
    ) l
    WHERE k.keyless
), more AS MATERIALIZED (
    SELECT h.ord, h.priority AS band, h.rank, h.quota, h.pos, c.id, c.run_at
    FROM share h
    CROSS JOIN LATERAL (SELECT h.batch - count(*)::integer AS short FROM cand) m
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at FROM tenure.jobs j
        WHERE j.state = 'ready' AND (j.metadata ->> 'tenure.fair_key') IS NOT NULL
          AND j.queue = @queue AND j.priority = h.priority AND (j.metadata ->> 'tenure.fair_key') = h.key
          AND j.run_at >= 'epoch'::timestamptz + h.after_us * interval '1 microsecond'
          AND j.run_at <= now() - h.min_age_us * interval '1 microsecond'
          AND j.run_at >  now() - h.max_age_us * interval '1 microsecond'
          AND j.payload_version <= (@kind_versions::integer[])[array_position(@kinds::text[], j.kind)]
          AND j.id NOT IN (SELECT cand.id FROM cand)
        ORDER BY j.run_at, j.id
        LIMIT m.short
        FOR UPDATE SKIP LOCKED
    ) c
    WHERE m.short > 0
      AND (SELECT count(*) FROM cand WHERE cand.ord = h.ord AND cand.pos = h.pos) = h.per
), numbered AS (
    SELECT a.*, row_number() OVER (PARTITION BY a.ord, a.pos ORDER BY a.run_at, a.id) AS rn
    FROM (SELECT * FROM cand UNION ALL SELECT * FROM more) a
), ranked AS (
    SELECT n.*, row_number() OVER (PARTITION BY n.band ORDER BY n.rank, n.rn, n.pos, n.run_at, n.id) AS band_rn
    FROM numbered n
), picked AS MATERIALIZED (
    SELECT r.id, r.pos, r.rn, r.band, r.run_at
    FROM ranked r
    ORDER BY (r.rank > 0 AND r.band_rn > r.quota), r.rank, r.rn, r.pos, r.run_at, r.id
    LIMIT @batch
), upd AS MATERIALIZED (
    SELECT o.* FROM tenure.own(ARRAY(SELECT picked.id FROM picked), @worker_id::text, @kinds::text[], @kind_lease_ms::integer[]) o
), upto AS (
    SELECT k.priority,
           CASE WHEN bool_and(NOT k.keyless OR k.id IN (SELECT picked.id FROM picked))
                THEN max(k.run_at)
                ELSE (SELECT max(pk.run_at) FROM picked pk WHERE pk.pos = 0 AND pk.band = k.priority)
           END AS upto
    FROM kscan k GROUP BY k.priority
), claimed AS (
    SELECT upd.*, picked.pos AS fair_pos, picked.rn::integer AS fair_round FROM upd JOIN picked ON picked.id = upd.id
), flags AS (
    SELECT jsonb_build_object(
             'keyless_band', coalesce(array_agg(upto.priority) FILTER (WHERE upto.upto IS NOT NULL), '{}'),
             'keyless_upto_us', coalesce(array_agg((extract(epoch FROM upto.upto) * 1000000)::bigint) FILTER (WHERE upto.upto IS NOT NULL), '{}')) AS feedback
    FROM upto
)
SELECT u.id, u.queue, u.kind, u.payload, u.payload_version, u.priority, u.run_at,
       u.attempts, u.max_attempts, u.lease_ms, u.locked_until, u.claim_token, u.generation,
       u.attempted_at, u.created_at, u.metadata, u.tags, u.snoozes,
       (f.feedback || jsonb_build_object('fair_pos', u.fair_pos, 'fair_round', u.fair_round))::jsonb AS feedback
FROM flags f LEFT JOIN claimed u ON true;

-- name: ClaimLimitsLock :exec
-- Flow control (worker/limits.go): the first statement of a limited claim. The engine sends it
-- and ClaimLimited in one pipeline (one round trip, one implicit transaction): this one waits
-- for the queue's limit stripes, locks (first_class..last_class, hashtext(queue)), in order (transaction-scoped,
-- released at commit): one stripe for a striped claim, all of them for an exclusive one.
-- ClaimLimited, a later statement, reads its snapshot only once they are held, so under READ
-- COMMITTED it sees every job claimed by every claim that held one of its stripes before it
-- (each committed before releasing it). The two-int4 form is a separate lock space from
-- Tenure's bigint keys (internal/locks).
SELECT pg_advisory_xact_lock(s.class, hashtext(@queue::text))
FROM generate_series(@first_class::integer, @last_class::integer) AS s(class);

-- name: ClaimLimited :many
-- ClaimOrdered under the queue's limits (worker/limits.go; run after ClaimLimitsLock in the
-- same transaction). Limits
-- are parallel arrays; a limit covers the jobs of lim_kind ('' = every kind of the queue),
-- grouped by their concurrency key (metadata "tenure.concurrency_key") when lim_per_key (jobs
-- without a key are not covered by a per-key limit). A group has room = min(max_running -
-- running leased jobs, rate - starts in the current fixed window), or 0 while a handler's
-- RetryAfter blocks it; 0 for max_running or rate means no such limit.
-- 1. grp: the groups something is counted for: marked running leased jobs (jobs_limited_idx),
--    and the rate groups' starts in the current window (tenure.flow).
-- 2. cand: the segments' candidates (each segment up to its seg_limit, up to @scan in all: the
--    nested loop stops there) with their claim order pos, ClaimOrdered's, skipping (a heap
--    filter on the same index range) jobs of groups without room.
-- 3. hit: each candidate under each limit covering it, numbered in claim order within its group
--    (skipped when roomy: every group has room for the whole batch and no limit counts starts);
--    a candidate is admitted if its number is within every group's room less @reserve (what
--    claims holding the other stripes may admit unseen: 0 for an exclusive claim) and within
--    @group_cap (what a striped claim may admit per group).
-- 4. the first @batch admitted are claimed; the rate groups' window counts are updated; rows of
--    kinds a concurrency limit covers are marked limited (they enter jobs_limited_idx).
-- The feedback is two flags, on the claimed rows or on one row of NULLs when nothing was
-- claimed. binding: a limit held something back (the engine then does not move the
-- band watermarks: a skipped job may lie behind the claimed ones). min_room: the smallest room
-- of a counted group less @batch (the engine's choice between striped and exclusive claims).
WITH clk AS MATERIALIZED (
    SELECT clock_timestamp() AS t
), lim AS MATERIALIZED (
    SELECT l.*, CASE WHEN l.period_us > 0
                     THEN 'epoch'::timestamptz + (div((extract(epoch FROM c.t) * 1000000)::numeric, l.period_us::numeric) * l.period_us)::bigint * interval '1 microsecond'
                END AS win
    FROM (SELECT unnest(@lim_id::integer[]) AS id,
                 unnest(@lim_kind::text[]) AS kind,
                 unnest(@lim_per_key::boolean[]) AS per_key,
                 unnest(@lim_max_running::integer[]) AS max_running,
                 unnest(@lim_rate::integer[]) AS rate,
                 unnest(@lim_period_us::bigint[]) AS period_us) AS l
    CROSS JOIN clk c
), marked AS MATERIALIZED (
    SELECT l.id, CASE WHEN l.per_key THEN r.metadata ->> 'tenure.concurrency_key' ELSE '' END AS key,
           count(*)::integer AS n
    FROM lim l
    JOIN tenure.jobs r ON r.queue = @queue AND r.limited AND r.locked_until IS NOT NULL
                      AND r.locked_until > (SELECT t FROM clk)
                      AND (l.kind = '' OR r.kind = l.kind)
                      AND (NOT l.per_key OR (r.metadata ->> 'tenure.concurrency_key') <> '')
    WHERE l.max_running > 0
    GROUP BY 1, 2
), rated AS MATERIALIZED (
    SELECT l.id, f.key,
           CASE WHEN l.rate = 0 THEN 0
                WHEN f.window_start = l.win THEN f.started
                WHEN f.window_start > l.win THEN l.rate
                ELSE 0 END AS started,
           coalesce(f.blocked_until > (SELECT t FROM clk), false) AS blocked
    FROM lim l
    JOIN tenure.flow f ON f.queue = @queue AND f.kind = l.kind
                      AND (CASE WHEN l.per_key THEN f.key <> '' ELSE f.key = '' END)
), grp AS MATERIALIZED (
    SELECT l.id, l.kind, l.per_key, k.key,
           least(CASE WHEN l.max_running > 0 THEN l.max_running - coalesce(b.n, 0) ELSE 2147483647 END,
                 CASE WHEN r.blocked THEN 0
                      WHEN l.rate > 0 THEN l.rate - coalesce(r.started, 0) ELSE 2147483647 END) AS room
    FROM (SELECT marked.id, marked.key FROM marked UNION SELECT rated.id, rated.key FROM rated) k
    JOIN lim l ON l.id = k.id
    LEFT JOIN marked b ON b.id = k.id AND b.key = k.key
    LEFT JOIN rated r ON r.id = k.id AND r.key = k.key
), seg AS (
    SELECT * FROM (SELECT unnest(@seg_priority::smallint[]) AS priority,
            unnest(@seg_after_us::bigint[]) AS after_us,
            unnest(@seg_min_age_us::bigint[]) AS min_age_us,
            unnest(@seg_max_age_us::bigint[]) AS max_age_us,
            unnest(@seg_limit::integer[]) AS lim,
            unnest(@seg_rank::integer[]) AS rank,
            unnest(@seg_quota::integer[]) AS quota) AS s
), cand0 AS MATERIALIZED (
    SELECT s.priority AS band, s.rank, s.quota, c.id, c.run_at, c.kind, c.ckey
    FROM seg s
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at, j.kind, nullif(j.metadata ->> 'tenure.concurrency_key', '') AS ckey
        FROM tenure.jobs j
        WHERE j.state = 'ready' AND j.queue = @queue AND j.priority = s.priority
          AND j.run_at >= 'epoch'::timestamptz + s.after_us * interval '1 microsecond'
          AND j.run_at <= now() - s.min_age_us * interval '1 microsecond'
          AND j.run_at >  now() - s.max_age_us * interval '1 microsecond'
          AND j.payload_version <= (@kind_versions::integer[])[array_position(@kinds::text[], j.kind)]
          AND (NOT (SELECT EXISTS (SELECT 1 FROM grp WHERE grp.room - @reserve::integer <= 0))
               OR NOT EXISTS (SELECT 1 FROM grp g
                          WHERE g.room - @reserve::integer <= 0 AND (g.kind = '' OR g.kind = j.kind)
                            AND (NOT g.per_key OR g.key = j.metadata ->> 'tenure.concurrency_key')))
        ORDER BY j.run_at, j.id
        LIMIT s.lim
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT @scan
), cand AS MATERIALIZED (
    -- pos: the claim order, ClaimOrdered's: a band's first `quota` candidates ahead of every
    -- band's overflow, then rank, run_at (ordered policies: segment order, then run_at).
    SELECT r.id, r.run_at, r.kind, r.ckey,
           row_number() OVER (ORDER BY (r.rank > 0 AND r.band_rn > r.quota), r.rank, r.run_at, r.id) AS pos
    FROM (SELECT c.*, row_number() OVER (PARTITION BY c.band ORDER BY c.rank, c.run_at, c.id) AS band_rn
          FROM cand0 c) AS r
), roomy AS MATERIALIZED (
    -- Every group, counted or not, has room for the whole batch (less the reserve, within the
    -- cap), none is paused and no limit counts starts: every candidate is admitted, and hit
    -- (the numbering) is never computed.
    SELECT (@group_cap::integer >= @batch::integer
            AND NOT EXISTS (SELECT 1 FROM lim WHERE lim.rate > 0
                            OR (lim.max_running > 0 AND lim.max_running - @reserve::integer < @batch::integer))
            AND NOT EXISTS (SELECT 1 FROM grp WHERE grp.room - @reserve::integer < @batch::integer))::boolean AS ok
), hit AS MATERIALIZED (
    SELECT c.id, l.id AS lid, l.kind, l.rate, l.win, x.key,
           row_number() OVER (PARTITION BY l.id, x.key ORDER BY c.pos) AS nth,
           coalesce(g.room, least(CASE WHEN l.max_running > 0 THEN l.max_running ELSE 2147483647 END,
                                  CASE WHEN l.rate > 0 THEN l.rate ELSE 2147483647 END)) AS room,
           least(coalesce(g.room, least(CASE WHEN l.max_running > 0 THEN l.max_running ELSE 2147483647 END,
                                        CASE WHEN l.rate > 0 THEN l.rate ELSE 2147483647 END)) - @reserve::integer,
                 @group_cap::integer) AS admit
    FROM cand c
    JOIN lim l ON (l.kind = '' OR l.kind = c.kind) AND (NOT l.per_key OR c.ckey IS NOT NULL)
    CROSS JOIN LATERAL (SELECT CASE WHEN l.per_key THEN c.ckey ELSE '' END AS key) x
    LEFT JOIN grp g ON g.id = l.id AND g.key = x.key
), picked AS MATERIALIZED (
    SELECT c.id FROM cand c
    WHERE (SELECT roomy.ok FROM roomy)
       OR NOT EXISTS (SELECT 1 FROM hit h WHERE h.id = c.id AND h.nth > h.admit)
    ORDER BY c.pos
    LIMIT @batch
), counted AS (
    INSERT INTO tenure.flow AS f (queue, kind, key, window_start, started, updated_at)
    SELECT @queue, h.kind, h.key, h.win, count(*)::integer, (SELECT t FROM clk)
    FROM hit h
    WHERE NOT (SELECT roomy.ok FROM roomy) AND h.rate > 0 AND h.id IN (SELECT picked.id FROM picked)
    GROUP BY h.lid, h.kind, h.key, h.win
    ON CONFLICT (queue, kind, key) DO UPDATE
    SET started      = CASE WHEN f.window_start >= excluded.window_start THEN f.started + excluded.started
                            ELSE excluded.started END,
        window_start = greatest(f.window_start, excluded.window_start),
        updated_at   = excluded.updated_at
    RETURNING f.key
), upd AS MATERIALIZED (
    -- marked limited: the kinds a concurrency limit covers; attempted_at: the rate windows' clock
    SELECT o.* FROM tenure.own(ARRAY(SELECT picked.id FROM picked), @worker_id::text, @kinds::text[], @kind_lease_ms::integer[],
                               ARRAY(SELECT l.kind FROM lim l WHERE l.max_running > 0), (SELECT t FROM clk)) o
), flags AS (
    SELECT jsonb_build_object(
             'binding', EXISTS (SELECT 1 FROM grp WHERE grp.room - @reserve::integer <= 0)
                        OR (NOT (SELECT roomy.ok FROM roomy) AND EXISTS (SELECT 1 FROM hit WHERE hit.nth > hit.admit)),
             'min_room', least((SELECT min(grp.room) FROM grp),
                               (SELECT min(least(CASE WHEN lim.max_running > 0 THEN lim.max_running ELSE 2147483647 END,
                                                 CASE WHEN lim.rate > 0 THEN lim.rate ELSE 2147483647 END)) FROM lim),
                               2147483647) - @batch::integer) AS feedback
)
SELECT u.id, u.queue, u.kind, u.payload, u.payload_version, u.priority, u.run_at,
       u.attempts, u.max_attempts, u.lease_ms, u.locked_until, u.claim_token, u.generation,
       u.attempted_at, u.created_at, u.metadata, u.tags, u.snoozes, f.feedback
FROM flags f LEFT JOIN upd u ON true;

-- name: PermitLock :exec
-- Permits (worker/permits.go): the first statement of a permit claim. The engine sends it and
-- ClaimPermitted in one pipeline (one round trip, one implicit transaction): it locks this
-- worker's permit rows of the queue, so ClaimPermitted, a later statement, takes its snapshot
-- after every earlier claim of this worker and every allocation that changed the rows committed.
-- Other workers' claims lock other rows: permit claims of different workers never wait for
-- each other.
SELECT p.kind FROM tenure.flow_permit p WHERE p.queue = @queue AND p.worker_id = @worker_id FOR UPDATE;

-- name: PermitAllocateLock :exec
-- Permits: the second statement of an allocation (after ClaimLimitsLock on every stripe, before
-- PermitAllocate, same pipeline and transaction): it locks every permit row of the queue, so
-- every permit claim in flight commits first and none starts until the allocation has.
SELECT p.kind FROM tenure.flow_permit p WHERE p.queue = @queue FOR UPDATE;

-- name: PermitAllocate :many
-- Permits: (re)size this worker's share of each limit, first in a permit transaction that
-- allocates (after ClaimLimitsLock on every stripe and PermitAllocateLock; ClaimPermitted
-- follows in the same pipeline and transaction) (parallel arrays lim_kind,
-- lim_max_running: every limit of a queue in permit mode is a concurrency limit without PerKey
-- and without Rate). Runs with every stripe and every permit row of the queue locked, so its
-- counts are exact: per limit and worker, used = the worker's running, leased, marked jobs the
-- limit covers (jobs_limited_idx). A worker's hold is greatest(used, amount). Per limit:
-- 1. live: the rows whose expires_at has not passed, and this worker's (its row is created);
--    fair = max_running / live rows.
-- 2. Another worker's row: expired → deleted (its used jobs still count); live, while this worker
--    holds less than least(want, fair) → lowered to at most fair (it cannot claim past it; its
--    jobs above it still count until they end); else unchanged.
-- 3. This worker: amount = least(want, max_running − Σ other workers' holds), at least 0;
--    it expires ttl_ms from now.
-- Every worker's hold then sums to at most max_running (the proof is in worker/permits.go).
-- Returns, per limit, the amount granted and the limit's fair share.
WITH lim AS MATERIALIZED (
    SELECT unnest(@lim_kind::text[]) AS kind, unnest(@lim_max_running::integer[]) AS max_running
), used AS MATERIALIZED (
    SELECT l.kind, r.locked_by AS worker_id, count(*)::integer AS n
    FROM lim l
    JOIN tenure.jobs r ON r.queue = @queue AND r.limited AND r.locked_until IS NOT NULL
                      AND r.locked_until > clock_timestamp()
                      AND (l.kind = '' OR r.kind = l.kind)
    GROUP BY 1, 2
), rows AS MATERIALIZED (
    SELECT p.kind, p.worker_id, p.amount, p.expires_at > clock_timestamp() AS live
    FROM tenure.flow_permit p
    JOIN lim l ON l.kind = p.kind
    WHERE p.queue = @queue AND p.worker_id <> @worker_id::text
), share AS MATERIALIZED (
    SELECT l.kind, l.max_running,
           greatest(1, l.max_running / (1 + (SELECT count(*) FROM rows r WHERE r.kind = l.kind AND r.live))::integer) AS fair,
           coalesce((SELECT p.amount FROM tenure.flow_permit p
                     WHERE p.queue = @queue AND p.worker_id = @worker_id::text AND p.kind = l.kind), 0) AS mine
    FROM lim l
), others AS MATERIALIZED (
    SELECT r.kind, r.worker_id, r.amount AS old, r.live,
           CASE WHEN NOT r.live THEN 0
                WHEN s.mine < least(@want::integer, s.fair) THEN least(r.amount, s.fair)
                ELSE r.amount END AS amount
    FROM rows r JOIN share s ON s.kind = r.kind
), held AS MATERIALIZED (
    SELECT s.kind, coalesce(sum(greatest(coalesce(u.n, 0), coalesce(o.amount, 0))), 0)::integer AS n
    FROM share s
    LEFT JOIN (SELECT o.kind, o.worker_id FROM others o
               UNION SELECT u.kind, u.worker_id FROM used u WHERE u.worker_id <> @worker_id::text) w ON w.kind = s.kind
    LEFT JOIN others o ON o.kind = w.kind AND o.worker_id = w.worker_id
    LEFT JOIN used u ON u.kind = w.kind AND u.worker_id = w.worker_id
    GROUP BY s.kind
), grant_ AS MATERIALIZED (
    SELECT s.kind, s.max_running, s.fair,
           greatest(0, least(@want::integer, s.max_running - h.n))::integer AS amount
    FROM share s JOIN held h ON h.kind = s.kind
), dropped AS (
    DELETE FROM tenure.flow_permit p
    USING others o
    WHERE NOT o.live AND p.queue = @queue AND p.worker_id = o.worker_id AND p.kind = o.kind
    RETURNING p.kind
), lowered AS (
    UPDATE tenure.flow_permit p
    SET amount = o.amount, updated_at = now()
    FROM others o
    WHERE o.live AND o.amount < o.old AND p.queue = @queue AND p.worker_id = o.worker_id AND p.kind = o.kind
    RETURNING p.kind
), mine AS (
    INSERT INTO tenure.flow_permit AS p (queue, worker_id, kind, max_running, amount, want, expires_at, updated_at)
    SELECT @queue, @worker_id::text, g.kind, g.max_running, g.amount, @want::integer,
           now() + interval '1 millisecond' * @ttl_ms::integer, now()
    FROM grant_ g
    ON CONFLICT (queue, worker_id, kind) DO UPDATE
    SET max_running = excluded.max_running, amount = excluded.amount, want = excluded.want,
        expires_at = excluded.expires_at, updated_at = excluded.updated_at
    RETURNING p.kind, p.amount
)
SELECT m.kind, m.amount, g.fair::integer AS fair,
       ((SELECT count(*) FROM dropped) + (SELECT count(*) FROM lowered))::integer AS changed
FROM mine m JOIN grant_ g ON g.kind = m.kind;

-- name: ClaimPermitted :many
-- Permits: ClaimOrdered within this worker's permits (run after PermitLock, or, in a permit
-- transaction that allocates, after PermitAllocate: its snapshot then includes the new share).
-- Per limit: room = amount − the worker's running, leased, marked jobs it covers (0 without a
-- row, or while a RetryAfter pause blocks the limit); the candidates (ordered, up to scan,
-- skipping kinds whose room is 0) are admitted in claim order while every covering limit's
-- room lasts, the first batch admitted claimed and marked (limited = true, so the counts see
-- them). It renews the rows (to ttl_ms from now) once less than renew_below_ms is left.
-- The feedback is five flags, on the claimed rows or on one row of NULLs when nothing was
-- claimed: has_permit (a row for every limit: else the engine allocates), binding (a limit's
-- room ran out in this claim: jobs may have been held back), skipped (a job the claim passed
-- over for lack of room may lie before one it claimed: the engine must not move its
-- watermarks; never with limits that cover every kind, whose room bounds the candidates) and
-- room_left (the smallest room after the claim), and renewed (the permit rows renewed).
WITH lim AS MATERIALIZED (
    SELECT unnest(@lim_kind::text[]) AS kind, unnest(@lim_max_running::integer[]) AS max_running
), room AS MATERIALIZED (
    SELECT l.kind, pm.worker_id IS NOT NULL AS has,
           CASE WHEN pm.worker_id IS NULL OR coalesce(f.blocked_until > now(), false) THEN 0
                ELSE greatest(0, pm.amount - (
                    SELECT count(*) FROM tenure.jobs r
                    WHERE r.queue = @queue AND r.limited AND r.locked_until IS NOT NULL
                      AND r.locked_until > clock_timestamp() AND (l.kind = '' OR r.kind = l.kind)
                      AND r.locked_by = @worker_id::text)::integer) END AS room
    FROM lim l
    LEFT JOIN tenure.flow_permit pm ON pm.queue = @queue AND pm.worker_id = @worker_id::text AND pm.kind = l.kind
    LEFT JOIN tenure.flow f ON f.queue = @queue AND f.kind = l.kind AND f.key = ''
), seg AS (
    SELECT * FROM (SELECT unnest(@seg_priority::smallint[]) AS priority,
            unnest(@seg_after_us::bigint[]) AS after_us,
            unnest(@seg_min_age_us::bigint[]) AS min_age_us,
            unnest(@seg_max_age_us::bigint[]) AS max_age_us,
            generate_subscripts(@seg_priority::smallint[], 1) AS ord) AS s
), cap AS MATERIALIZED (
    -- When one limit covers every kind the claim may take, its room bounds what it claims, and
    -- the candidates are claimed in order: lock no more than the batch or that room. Otherwise
    -- read up to scan candidates (those of a kind without room are skipped).
    SELECT coalesce((SELECT CASE WHEN count(*) > 0 THEN least(@batch::integer, min(r.room)) END FROM room r
                     WHERE r.kind = '' OR r.kind = ALL (@kinds::text[])), @scan::integer) AS n
), cand AS MATERIALIZED (
    SELECT c.id, c.kind, row_number() OVER (ORDER BY s.ord, c.run_at, c.id) AS pos
    FROM seg s
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at, j.kind
        FROM tenure.jobs j
        WHERE j.state = 'ready' AND j.queue = @queue AND j.priority = s.priority
          AND j.run_at >= 'epoch'::timestamptz + s.after_us * interval '1 microsecond'
          AND j.run_at <= now() - s.min_age_us * interval '1 microsecond'
          AND j.run_at >  now() - s.max_age_us * interval '1 microsecond'
          AND j.payload_version <= (@kind_versions::integer[])[array_position(@kinds::text[], j.kind)]
          AND NOT EXISTS (SELECT 1 FROM room r WHERE r.room = 0 AND (r.kind = '' OR r.kind = j.kind))
        ORDER BY j.run_at, j.id
        LIMIT (SELECT cap.n FROM cap)
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT (SELECT cap.n FROM cap)
), hit AS MATERIALIZED (
    SELECT c.id, r.kind, r.room, row_number() OVER (PARTITION BY r.kind ORDER BY c.pos) AS nth
    FROM cand c JOIN room r ON r.kind = '' OR r.kind = c.kind
), picked AS MATERIALIZED (
    SELECT c.id, c.kind FROM cand c
    WHERE NOT EXISTS (SELECT 1 FROM hit h WHERE h.id = c.id AND h.nth > h.room)
    ORDER BY c.pos
    LIMIT @batch
), upd AS MATERIALIZED (
    -- marked limited: every permit limit is a concurrency limit
    SELECT o.* FROM tenure.own(ARRAY(SELECT picked.id FROM picked), @worker_id::text, @kinds::text[], @kind_lease_ms::integer[],
                               ARRAY(SELECT l.kind FROM lim l)) o
), ttl AS MATERIALIZED (
    -- (sqlc cannot place a parameter in the SET list of an UPDATE inside a WITH)
    SELECT now() + interval '1 millisecond' * @ttl_ms::integer AS until,
           now() + interval '1 millisecond' * @renew_below_ms::integer AS renew_below
), renew AS (
    UPDATE tenure.flow_permit pm
    SET expires_at = (SELECT ttl.until FROM ttl), updated_at = now()
    WHERE pm.queue = @queue AND pm.worker_id = @worker_id::text
      AND pm.expires_at < (SELECT ttl.renew_below FROM ttl)
    RETURNING pm.kind
), left_ AS MATERIALIZED (
    SELECT r.kind, r.has, r.room - (SELECT count(*) FROM picked p WHERE r.kind = '' OR r.kind = p.kind)::integer AS room
    FROM room r
), flags AS (
    SELECT jsonb_build_object(
             'has_permit', coalesce(bool_and(l.has), false),
             'binding', coalesce(bool_or(l.room <= 0), false),
             'skipped', EXISTS (SELECT 1 FROM picked)
                        AND (EXISTS (SELECT 1 FROM room r WHERE r.room = 0 AND r.kind <> '')
                             OR EXISTS (SELECT 1 FROM cand c WHERE c.id NOT IN (SELECT picked.id FROM picked)
                                        AND c.pos < (SELECT max(c2.pos) FROM cand c2 WHERE c2.id IN (SELECT picked.id FROM picked)))),
             'room_left', coalesce(min(l.room), 0),
             'renewed', (SELECT count(*) FROM renew)) AS feedback
    FROM left_ l
)
SELECT u.id, u.queue, u.kind, u.payload, u.payload_version, u.priority, u.run_at,
       u.attempts, u.max_attempts, u.lease_ms, u.locked_until, u.claim_token, u.generation,
       u.attempted_at, u.created_at, u.metadata, u.tags, u.snoozes, f.feedback
FROM flags f LEFT JOIN upd u ON true;

-- name: FlowBlock :exec
-- A handler's RetryAfter(err, d) on a job covered by a limit with RetryAfterPauses: the limit's
-- group (queue, kind or '', key or '') starts nothing before now() + d (never shortened).
INSERT INTO tenure.flow AS f (queue, kind, key, blocked_until)
SELECT g.q, g.kind, g.fkey, now() + g.delay_us * interval '1 microsecond'
FROM (SELECT @queue::text AS q, @delay_us::bigint AS delay_us,
             unnest(@kinds::text[]) AS kind, unnest(@group_keys::text[]) AS fkey) AS g
ON CONFLICT (queue, kind, key) DO UPDATE
SET blocked_until = greatest(f.blocked_until, excluded.blocked_until), updated_at = now();

-- name: FlowPrune :one
-- Flow control housekeeping (worker/limits.go, "Pruning tenure.flow"): one bounded step through
-- a queue's tenure.flow rows in key order, from the start or after (after_kind, after_key): of the next @batch rows
-- it deletes those that carry no information: no pause in force (blocked_until passed or
-- unset) and a window that is over (window_start + the period of the rate limit the row belongs
-- to — lim_* lists the queue's rate limits — or + 24 h, the longest period, for a row no
-- configured rate limit claims). Only while this transaction holds the flow prune lock
-- (pg_try_advisory_xact_lock, internal/locks): one pruner at a time. Returns how many rows it
-- read and deleted and the last key read (the caller's next cursor).
WITH lk AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(@lock_key::bigint) AS got
), lim AS MATERIALIZED (
    SELECT unnest(@lim_kind::text[]) AS kind, unnest(@lim_per_key::boolean[]) AS per_key,
           unnest(@lim_period_us::bigint[]) AS period_us
), scanned AS MATERIALIZED (
    SELECT f.kind, f.key FROM tenure.flow f
    WHERE (SELECT lk.got FROM lk) AND f.queue = @queue::text
      AND (@from_start::boolean OR (f.kind, f.key) > (@after_kind::text, @after_key::text))
    ORDER BY f.kind, f.key
    LIMIT @batch::integer
), victim AS MATERIALIZED (
    SELECT f.kind, f.key, coalesce(l.period_us, 86400000000) AS period_us
    FROM scanned s
    JOIN tenure.flow f ON f.queue = @queue::text AND f.kind = s.kind AND f.key = s.key
    LEFT JOIN lim l ON l.kind = f.kind AND l.per_key = (f.key <> '')
    WHERE (f.blocked_until IS NULL OR f.blocked_until <= now())
      AND f.window_start + coalesce(l.period_us, 86400000000) * interval '1 microsecond' <= now()
    FOR UPDATE OF f SKIP LOCKED
), gone AS (
    DELETE FROM tenure.flow f
    USING victim v
    WHERE f.queue = @queue::text AND f.kind = v.kind AND f.key = v.key
      AND (f.blocked_until IS NULL OR f.blocked_until <= now())
      AND f.window_start + v.period_us * interval '1 microsecond' <= now()
    RETURNING f.key
)
SELECT (SELECT count(*) FROM scanned)::integer AS scanned,
       (SELECT count(*) FROM gone)::integer AS deleted,
       coalesce((SELECT s.kind FROM scanned s ORDER BY s.kind DESC, s.key DESC LIMIT 1), '')::text AS last_kind,
       coalesce((SELECT s.key FROM scanned s ORDER BY s.kind DESC, s.key DESC LIMIT 1), '')::text AS last_key,
       (SELECT lk.got FROM lk)::boolean AS locked;

-- ---------------------------------------------------------------------------------------------
-- Fenced transitions (docs/contract.md §2). Each returns the ids it changed; a missing id is a
-- stale write (the caller lost ownership) and is never reported as success.
-- ---------------------------------------------------------------------------------------------

-- name: CompleteMany :many
-- running -> succeeded, batched, with the output each handler recorded (JSON null: none).
-- Like every batched finish below, it never waits on a row lock: a row that another session
-- holds locked (an operator's or the application's open transaction) is skipped and returned
-- with busy = true, still owned as this statement's snapshot sees it, so that one locked row
-- delays only its own finish (the engine then waits for that row alone: LockFinish). The other
-- rows are changed and returned with busy = false. A job missing from the result is a stale
-- write. (The lock costs each finished row a row-lock WAL record: measured in docs/design.md.)
-- locked carries each row's token, output and progress, so done and gone join the locked rows
-- alone (joining f again was a hash join per statement; docs/design.md "Finish path").
-- Delete on success (deletes[i], HandlerOptions.DeleteOnSuccess, docs/guide.md §28): the job's
-- row is deleted instead, with its effect-ledger rows, fenced exactly like the update (same
-- locked rows, id + state + claim token), unless the row must stay: a workflow task or sequence
-- job (its dependents and DependencyOutput read it), or a unique job whose unique states hold
-- the key in succeeded (deleting it would free the key); such rows are returned with
-- deleted = true. No NOTIFY here: the engine sends the done signal after the commit
-- (NotifyDoneMany; a deleted job named s<id>: jobs.Client.Wait reads it as succeeded, row gone),
-- and so the signals of the dependents the trigger released or cancelled (sig; settles: the
-- row has dependents, NotifyDoneSettled reads what they became).
-- A NOTIFY in a writing transaction holds PostgreSQL's one notification-queue lock from its
-- pre-commit through its WAL flush, so every such commit in the cluster waits for the previous
-- one's flush (docs/design.md, "The done signal after the commit").
WITH f AS (
    SELECT unnest(@ids::bigint[]) AS id,
           unnest(@tokens::uuid[]) AS token,
           unnest(@outputs::jsonb[]) AS output,
           unnest(sqlc.narg(progress)::jsonb[]) AS progress,
           unnest(sqlc.narg(deletes)::boolean[]) AS del
), sig AS (
    -- The settle of dependents (the trigger jobs_settle_dependents) sends no NOTIFY in this
    -- transaction (tenure.settle_jobs, migration 0029): the engine sends the wake-up of what it
    -- released and the done signal of what it cancelled after the commit (NotifyDoneMany, from
    -- the ids returned with settles). Read by locked's filter, so set before any row changes.
    SELECT set_config('tenure.signals', 'after_commit', true) = 'after_commit' AS quiet
), locked AS (
    SELECT j.id, f.token, f.output, f.progress,
           (coalesce(f.del, false) AND j.workflow_id IS NULL AND j.sequence_key IS NULL AND j.has_dependents IS NOT TRUE
            AND NOT (j.unique_key IS NOT NULL AND tenure.unique_state_held(j.unique_states, 'succeeded'))) AS del
    FROM tenure.jobs j JOIN f ON j.id = f.id
    WHERE j.state = 'running' AND j.claim_token = f.token AND (SELECT s.quiet FROM sig s)
    FOR UPDATE OF j SKIP LOCKED
), done AS (
    UPDATE tenure.jobs j
    SET state = 'succeeded', locked_by = NULL, locked_until = NULL, finished_at = now(), updated_at = now(),
        output = nullif(l.output, 'null'::jsonb),
        progress = coalesce(nullif(l.progress, 'null'::jsonb), j.progress)
    FROM locked l
    WHERE j.id = l.id AND NOT l.del AND j.state = 'running' AND j.claim_token = l.token
    RETURNING j.id, coalesce(j.has_dependents, false) AS settles
), gone AS (
    DELETE FROM tenure.jobs j
    USING locked l
    WHERE j.id = l.id AND l.del AND j.state = 'running' AND j.claim_token = l.token
    RETURNING j.id
), gone_effects AS (
    DELETE FROM tenure.effects e WHERE e.job_id IN (SELECT g.id FROM gone g)
)
SELECT d.id, false AS busy, false AS deleted, d.settles FROM done d
UNION ALL
SELECT g.id, false, true, false FROM gone g
UNION ALL
SELECT j.id, true, false, false FROM f JOIN tenure.jobs j ON j.id = f.id
WHERE f.id NOT IN (SELECT l.id FROM locked l) AND j.state = 'running' AND j.claim_token = f.token;

-- name: CompleteOne :one
-- running -> succeeded for one job, usable inside the caller's transaction, with the
-- handler's recorded output (NULL: none); with delete (delete on success, CompleteMany) the
-- row is deleted instead, under the same conditions and fence as there. It returns the rows
-- changed (0 or 1) and, when 1, the caller's transaction id (txid_current): after a delete the
-- engine asks txid_status whether that transaction committed (the row cannot tell it).
-- It notifies the done channel in the caller's transaction (the engine cannot act after that
-- transaction commits; CompleteMany's signal is sent after its own commit instead): delivered
-- when the caller's transaction commits.
WITH me AS (
    SELECT j.id,
           (sqlc.arg(delete)::boolean AND j.workflow_id IS NULL AND j.sequence_key IS NULL AND j.has_dependents IS NOT TRUE
            AND NOT (j.unique_key IS NOT NULL AND tenure.unique_state_held(j.unique_states, 'succeeded'))) AS del
    FROM tenure.jobs j
    WHERE j.id = @id AND j.state = 'running' AND j.claim_token = @claim_token::uuid
    FOR UPDATE OF j
), done AS (
    UPDATE tenure.jobs j
    SET state = 'succeeded', locked_by = NULL, locked_until = NULL, finished_at = now(), updated_at = now(),
        output = sqlc.narg(output)::jsonb,
        progress = coalesce(sqlc.narg(progress)::jsonb, j.progress)
    FROM me
    WHERE j.id = me.id AND NOT me.del AND j.state = 'running' AND j.claim_token = @claim_token::uuid
    RETURNING j.id
), gone AS (
    DELETE FROM tenure.jobs j
    USING me
    WHERE j.id = me.id AND me.del AND j.state = 'running' AND j.claim_token = @claim_token::uuid
    RETURNING j.id
), gone_effects AS (
    DELETE FROM tenure.effects e WHERE e.job_id IN (SELECT g.id FROM gone g)
), notified AS (
    -- The done signal (CompleteMany): the id, or s<id> when the row was deleted.
    SELECT count(pg_notify('tenure_done', a.id)) AS n
    FROM (SELECT d.id::text AS id FROM done d UNION ALL SELECT 's' || g.id::text FROM gone g) a
)
SELECT count(a.id)::bigint AS changed,
       (count(a.id) > 0 AND bool_or(a.deleted))::boolean AS deleted,
       (CASE WHEN count(a.id) > 0 THEN txid_current() ELSE 0 END)::bigint AS xid
FROM (SELECT d.id, false AS deleted FROM done d UNION ALL SELECT g.id, true FROM gone g) a CROSS JOIN notified;

-- name: FailMany :many
-- running -> ready (retry after delay_us), dead or cancelled, batched, with the error code and a
-- bounded error history (the last 10 entries). A retry of a job with no attempts left is
-- turned into dead here too, so the database never loops a job past max_attempts; a retry of a
-- job an operator asked to cancel ends cancelled (the owner's write lands, and the cancel wins).
-- A row another session holds locked is skipped and returned busy (CompleteMany); rows this
-- transaction holds locked (the sweep's LockExpired) are not skipped. The rows returned in a
-- final state (dead, cancelled) get their done signal from the engine after the commit
-- (NotifyDoneMany), as do ReleaseMany's and SnoozeMany's cancelled rows.
WITH f AS (
    SELECT unnest(@ids::bigint[]) AS id,
           unnest(@tokens::uuid[]) AS token,
           unnest(@states::text[]) AS state,
           unnest(@delay_us::bigint[]) AS delay_us,
           unnest(@codes::text[]) AS code,
           unnest(@messages::text[]) AS message,
           unnest(sqlc.narg(outputs)::jsonb[]) AS output,
           unnest(sqlc.narg(progress)::jsonb[]) AS progress
), sig AS (
    -- settle signals after the commit (CompleteMany)
    SELECT set_config('tenure.signals', 'after_commit', true) = 'after_commit' AS quiet
), locked AS (
    SELECT j.id
    FROM tenure.jobs j JOIN f ON j.id = f.id
    WHERE j.state = 'running' AND j.claim_token = f.token AND (SELECT s.quiet FROM sig s)
    FOR UPDATE OF j SKIP LOCKED
), done AS (
    UPDATE tenure.jobs j
    SET state = CASE WHEN f.state = 'ready' AND j.cancel_requested_at IS NOT NULL THEN 'cancelled'::tenure.job_state
                     WHEN f.state = 'ready' AND (j.attempts >= j.max_attempts) THEN 'dead'::tenure.job_state
                     ELSE f.state::tenure.job_state END,
        run_at = CASE WHEN f.state = 'ready' AND j.cancel_requested_at IS NULL THEN now() + f.delay_us * interval '1 microsecond' ELSE j.run_at END,
        claim_token = CASE WHEN f.state = 'ready' AND j.attempts < j.max_attempts AND j.cancel_requested_at IS NULL THEN NULL ELSE j.claim_token END,
        finished_at = CASE WHEN f.state = 'ready' AND j.attempts < j.max_attempts AND j.cancel_requested_at IS NULL THEN NULL ELSE now() END,
        locked_by = NULL,
        locked_until = NULL,
        last_error_code = f.code,
        errors = (CASE WHEN jsonb_array_length(j.errors) >= 10 THEN j.errors - 0 ELSE j.errors END)
                 || jsonb_build_array(jsonb_build_object(
                        'attempt', j.attempts, 'generation', j.generation, 'code', f.code,
                        'message', f.message, 'at', now())
                    -- what the failed attempt recorded (worker.SetOutput, worker.Progress)
                    || CASE WHEN nullif(f.output, 'null'::jsonb) IS NULL THEN '{}'::jsonb
                            ELSE jsonb_build_object('output', f.output) END
                    || CASE WHEN coalesce(nullif(f.progress, 'null'::jsonb), j.progress) IS NULL THEN '{}'::jsonb
                            ELSE jsonb_build_object('progress', coalesce(nullif(f.progress, 'null'::jsonb), j.progress)) END),
        -- a retry starts the next attempt without progress; a final state keeps the last one
        progress = CASE WHEN f.state = 'ready' AND j.attempts < j.max_attempts AND j.cancel_requested_at IS NULL THEN NULL
                        ELSE coalesce(nullif(f.progress, 'null'::jsonb), j.progress) END,
        updated_at = now()
    FROM f JOIN locked l ON l.id = f.id
    WHERE j.id = f.id AND j.state = 'running' AND j.claim_token = f.token
    RETURNING j.id, j.state, coalesce(j.has_dependents, false) AS settles
)
SELECT d.id, d.state, false AS busy, d.settles FROM done d
UNION ALL
SELECT j.id, j.state, true, false FROM f JOIN tenure.jobs j ON j.id = f.id
WHERE f.id NOT IN (SELECT l.id FROM locked l) AND j.state = 'running' AND j.claim_token = f.token;

-- name: ReleaseMany :many
-- Give running jobs back without charging the interrupted attempt, due again after delay_us:
-- a graceful stop (delay 0), or a job this worker cannot decode yet (a newer payload version
-- during a rolling deploy). The generation is not reused: the next claim takes generation+1.
-- A job with a pending cancel request ends cancelled instead. A locked row is returned busy
-- (CompleteMany).
WITH f AS (
    SELECT unnest(@ids::bigint[]) AS id,
           unnest(@tokens::uuid[]) AS token,
           unnest(@delay_us::bigint[]) AS delay_us
), sig AS (
    -- settle signals after the commit (CompleteMany)
    SELECT set_config('tenure.signals', 'after_commit', true) = 'after_commit' AS quiet
), locked AS (
    SELECT j.id
    FROM tenure.jobs j JOIN f ON j.id = f.id
    WHERE j.state = 'running' AND j.claim_token = f.token AND (SELECT s.quiet FROM sig s)
    FOR UPDATE OF j SKIP LOCKED
), done AS (
    UPDATE tenure.jobs j
    SET state = CASE WHEN j.cancel_requested_at IS NULL THEN 'ready'::tenure.job_state ELSE 'cancelled'::tenure.job_state END,
        run_at = CASE WHEN j.cancel_requested_at IS NULL THEN now() + f.delay_us * interval '1 microsecond' ELSE j.run_at END,
        attempts = CASE WHEN j.cancel_requested_at IS NULL THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        claim_token = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE j.claim_token END,
        finished_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE now() END,
        locked_by = NULL,
        locked_until = NULL,
        progress = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE j.progress END,
        updated_at = now()
    FROM f JOIN locked l ON l.id = f.id
    WHERE j.id = f.id AND j.state = 'running' AND j.claim_token = f.token
    RETURNING j.id, j.state, coalesce(j.has_dependents, false) AS settles
)
SELECT d.id, d.state, false AS busy, d.settles FROM done d
UNION ALL
SELECT j.id, j.state, true, false FROM f JOIN tenure.jobs j ON j.id = f.id
WHERE f.id NOT IN (SELECT l.id FROM locked l) AND j.state = 'running' AND j.claim_token = f.token;

-- name: SnoozeMany :many
-- running -> ready after delay_us, asked by the handler (worker.Snooze): the attempt is not
-- charged (attempts goes back down) and snoozes counts it. Fenced by token and generation.
-- The engine decides beforehand that the job may still snooze (snoozes below the kind's
-- limit); past it the handler's snooze is a failed attempt (FailMany). A job with a pending
-- cancel request ends cancelled instead. The next claim takes generation+1. A locked row is
-- returned busy (CompleteMany).
WITH f AS (
    SELECT unnest(@ids::bigint[]) AS id,
           unnest(@tokens::uuid[]) AS token,
           unnest(@generations::bigint[]) AS generation,
           unnest(@delay_us::bigint[]) AS delay_us
), sig AS (
    -- settle signals after the commit (CompleteMany)
    SELECT set_config('tenure.signals', 'after_commit', true) = 'after_commit' AS quiet
), locked AS (
    SELECT j.id
    FROM tenure.jobs j JOIN f ON j.id = f.id
    WHERE j.state = 'running' AND j.claim_token = f.token AND j.generation = f.generation AND (SELECT s.quiet FROM sig s)
    FOR UPDATE OF j SKIP LOCKED
), done AS (
    UPDATE tenure.jobs j
    SET state = CASE WHEN j.cancel_requested_at IS NULL THEN 'ready'::tenure.job_state ELSE 'cancelled'::tenure.job_state END,
        run_at = CASE WHEN j.cancel_requested_at IS NULL THEN now() + f.delay_us * interval '1 microsecond' ELSE j.run_at END,
        attempts = CASE WHEN j.cancel_requested_at IS NULL THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        snoozes = CASE WHEN j.cancel_requested_at IS NULL THEN j.snoozes + 1 ELSE j.snoozes END,
        claim_token = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE j.claim_token END,
        finished_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE now() END,
        locked_by = NULL,
        locked_until = NULL,
        progress = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE j.progress END,
        updated_at = now()
    FROM f JOIN locked l ON l.id = f.id
    WHERE j.id = f.id AND j.state = 'running' AND j.claim_token = f.token AND j.generation = f.generation
    RETURNING j.id, j.state, coalesce(j.has_dependents, false) AS settles
)
SELECT d.id, d.state, false AS busy, d.settles FROM done d
UNION ALL
SELECT j.id, j.state, true, false FROM f JOIN tenure.jobs j ON j.id = f.id
WHERE f.id NOT IN (SELECT l.id FROM locked l) AND j.state = 'running' AND j.claim_token = f.token
  AND j.generation = f.generation;

-- name: LockFinish :many
-- Waits for the row locks of still-owned running jobs (fenced like the finishes), in id order,
-- in the caller's transaction: the engine runs it for a job its batched finish returned busy,
-- then that job's finish statement in the same transaction. First it takes, for the
-- transaction, the advisory lock (FinishWaitClass = 1952804473, hashint8(id)) of each job
-- (internal/locks): a sweep that takes the row in the moment the other session's lock goes
-- sees it (LockExpired.finish_waiting) and leaves the row to this finish.
WITH f AS (
    SELECT unnest(@ids::bigint[]) AS id, unnest(@tokens::uuid[]) AS token
), marked AS (
    SELECT f.id, f.token, pg_advisory_xact_lock(1952804473, hashint8(f.id)) AS m FROM f
)
SELECT j.id FROM tenure.jobs j
JOIN marked f ON j.id = f.id
WHERE j.state = 'running' AND j.claim_token = f.token
ORDER BY j.id
FOR UPDATE OF j;

-- name: Heartbeat :many
-- Extends the leases of still-owned, still-leased jobs by their lease length, on the database
-- clock (extended = true). It never waits on a row lock: a job whose row another session holds
-- locked (an operator's or the application's open transaction) is skipped and returned with
-- extended = false, still owned as this statement's snapshot sees it; waiting would hold back
-- every other job of the batch until the lock is released. A job missing from the result has
-- lost its lease. cancel_requested tells the worker an operator asked to cancel it.
-- The lease is compared through coalesce, not as locked_until > now(): a strict comparison on
-- locked_until implies the predicate of jobs_running_idx (locked_until IS NOT NULL) and makes
-- that index a path, and a generic plan made while nothing ran (a backlog analyzed before the
-- workers started) walks every running job of the table through it for each heartbeat, and
-- every queue of a worker sends its own (TestHeartbeatReadsOnlyItsJobsAmongManyRunning).
-- progress (JSON null or a missing element: unchanged) is what the handler reported
-- (worker.Progress) since the last write: it rides on the heartbeat, fenced like the lease.
WITH f AS (
    SELECT unnest(@ids::bigint[]) AS id, unnest(@tokens::uuid[]) AS token,
           unnest(sqlc.narg(progress)::jsonb[]) AS progress
), owned AS (
    SELECT j.id
    FROM tenure.jobs j JOIN f ON j.id = f.id
    WHERE j.state = 'running' AND j.claim_token = f.token AND coalesce(j.locked_until, '-infinity') > now()
    FOR UPDATE OF j SKIP LOCKED
), extended AS (
    UPDATE tenure.jobs j
    SET locked_until = now() + j.lease_ms * interval '1 millisecond', updated_at = now(),
        progress = coalesce(nullif(f.progress, 'null'::jsonb), j.progress)
    FROM owned o JOIN f ON f.id = o.id
    WHERE j.id = o.id
    RETURNING j.id, (j.cancel_requested_at IS NOT NULL)::boolean AS cancel_requested
)
SELECT e.id, e.cancel_requested, true AS extended FROM extended e
UNION ALL
SELECT j.id, (j.cancel_requested_at IS NOT NULL)::boolean, false
FROM tenure.jobs j JOIN f ON j.id = f.id
WHERE j.state = 'running' AND j.claim_token = f.token AND coalesce(j.locked_until, '-infinity') > now()
  AND j.id NOT IN (SELECT o.id FROM owned o);

-- ---------------------------------------------------------------------------------------------
-- Reclaim (docs/contract.md §3): expired leases are a failed attempt with code LEASE_EXPIRED.
-- LockExpired and FailMany run in one transaction; the backoff is computed in Go in between.
-- ---------------------------------------------------------------------------------------------

-- name: LockExpired :many
-- finish_waiting: the owner's finish is waiting for this row's lock (LockFinish holds the
-- advisory lock (FinishWaitClass, hashint8(id)), internal/locks, while it waits): the sweep
-- took the row in the moment between another session's lock going and that waiter taking it;
-- it must leave the row to the waiter. The probe takes and at once releases the lock.
WITH expired AS (
    SELECT id, claim_token, attempts, max_attempts, kind, queue, cancel_requested_at, locked_until
    FROM tenure.jobs
    WHERE state = 'running' AND locked_until < now()
    ORDER BY locked_until
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED
)
SELECT e.id, e.claim_token, e.attempts, e.max_attempts, e.kind, e.queue,
       (e.cancel_requested_at IS NOT NULL)::boolean AS cancel_requested,
       (NOT CASE WHEN pg_try_advisory_lock(1952804473, hashint8(e.id))
                 THEN pg_advisory_unlock(1952804473, hashint8(e.id)) ELSE false END)::boolean AS finish_waiting
FROM expired e
ORDER BY e.locked_until;

-- ---------------------------------------------------------------------------------------------
-- Operator actions. Each runs in a transaction with its audit row.
-- ---------------------------------------------------------------------------------------------

-- name: LockJob :one
SELECT * FROM tenure.jobs WHERE id = @id FOR UPDATE;

-- name: CancelReady :one
-- ready (or waiting for dependencies) -> cancelled, at once.
UPDATE tenure.jobs
SET state = 'cancelled', finished_at = now(), cancel_requested_at = now(), updated_at = now()
WHERE id = @id AND state IN ('ready', 'waiting')
RETURNING *;

-- name: RequestCancel :one
-- running -> cancel requested; the owning worker cancels the handler and ends it cancelled.
UPDATE tenure.jobs
SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
WHERE id = @id AND state = 'running'
RETURNING *;

-- name: NotifyCancel :exec
SELECT pg_notify('tenure_cancel', to_char(@job_id::bigint, 'FM99999999999999999999'));

-- name: NotifyDone :exec
-- The done signal for jobs an operator ended or deleted (CompleteMany's payload: ids).
SELECT pg_notify('tenure_done', @ids::text);

-- name: NotifyDoneMany :one
-- The engine's done signal, sent after the finish that ended the jobs committed (never inside
-- it: CompleteMany): one notification per payload, each up to 350 comma-separated entries (the
-- id of a job that reached a final state, s<id> for one deleted on success). Autocommitted and
-- writing nothing, its commit flushes no WAL, so it holds the notification-queue lock only
-- for the moment of its own commit.
SELECT count(pg_notify('tenure_done', p))::bigint AS notified FROM unnest(@payloads::text[]) AS p;

-- name: NotifyDoneSettled :one
-- NotifyDoneMany, when some of the jobs have dependents (the engine sends NotifyDoneMany
-- alone otherwise, so that plain jobs pay nothing for this read). settled: the jobs of those finishes that have dependents (the finishes' settles column). Their
-- settle (tenure.settle_jobs) sent no signal in the finish's transaction (migration 0029); this
-- statement reads what their dependents are now, after that commit, and sends what the settle
-- would have: the new-job wake-up (InsertJob's payload) per queue and band of those ready and
-- due, and the done signal of those cancelled, following cancelled dependents to their own (a
-- cascade). A dependent already claimed needs no wake-up; one ready or cancelled before (by
-- another finish, an operator) is signalled again, which a listener tolerates (a wake-up finds
-- nothing to claim, a waiter reads a final job). An empty settled reads nothing. At most 1,000
-- dependents of each job are read: a settle round that resolved 1,000 edges or more (a mass
-- release, a fan-out's root) notified in its own transaction (settle_jobs), so its signals are
-- sent already, and reading 100,000 dependents back (~0.1-1.5 s) would hold up every other
-- done signal. Missed, so left to the poll (FetchPollMax): a job of more than 1,000
-- dependents whose last ones it released in a round of fewer than 1,000 edges (its 'block'
-- edges, resolved by a success after an operator's retry of its failure).
-- Every read of tenure.jobs here is by primary key (a lookup per dependent in a LATERAL that
-- a LIMIT keeps from being flattened into a join, = ANY of an array for st; state compared as
-- text, so that no partial index's predicate matches: the cascade's lookup otherwise walked
-- jobs_finished_idx, every finished job, per dependent): joined to the dependents, the
-- planner hash-joined a scan of every ready job (st) and of every finished one (the cascade),
-- per call: a finish batch of a 3,000-task fan-out read ~760 buffers here, and the read grows
-- with the table (bench/results/2026-12-04-workflow-settle.md).
WITH RECURSIVE dep AS (
    SELECT e.job_id
    FROM unnest(@settled::bigint[]) AS s(id)
    CROSS JOIN LATERAL (SELECT d.job_id FROM tenure.job_deps d WHERE d.dep_id = s.id
                        ORDER BY d.dep_id, d.job_id LIMIT 1000) e
    UNION
    SELECT e.job_id
    FROM dep x
    CROSS JOIN LATERAL (SELECT j.id FROM tenure.jobs j
                        WHERE j.id = x.job_id AND j.state::text = 'cancelled' AND j.has_dependents LIMIT 1) c
    CROSS JOIN LATERAL (SELECT d.job_id FROM tenure.job_deps d WHERE d.dep_id = c.id
                        ORDER BY d.dep_id, d.job_id LIMIT 1000) e
), st AS MATERIALIZED (
    SELECT j.id, j.state::text AS state, j.queue, j.priority, j.run_at
    FROM tenure.jobs j
    WHERE j.id = ANY (ARRAY(SELECT x.job_id FROM dep x)) AND j.state::text IN ('ready', 'cancelled')
), woken AS (
    SELECT count(pg_notify('tenure_jobs', r.queue || chr(31) || r.priority || chr(31)
                           || (extract(epoch FROM r.run_at) * 1000000)::bigint)) AS n
    FROM (SELECT s.queue, s.priority, min(s.run_at) AS run_at FROM st s
          WHERE s.state = 'ready' AND s.run_at <= now()
          GROUP BY s.queue, s.priority) r
), ended AS (
    SELECT count(pg_notify('tenure_done', e.ids)) AS n
    FROM (SELECT string_agg(x.id::text, ',') AS ids
          FROM (SELECT s.id, row_number() OVER () AS rn FROM st s WHERE s.state = 'cancelled') x
          GROUP BY (x.rn - 1) / 350) e
)
SELECT ((SELECT count(pg_notify('tenure_done', p)) FROM unnest(@payloads::text[]) AS p)
        + (SELECT w.n FROM woken w) + (SELECT e.n FROM ended e))::bigint AS notified;

-- name: KindTimeout :one
-- The handler timeout (ms) published for a kind (tenure.kinds): the given worker's when it
-- publishes the kind, else the largest any worker publishes; 0 when none does.
SELECT coalesce((SELECT coalesce(max(k.timeout_ms) FILTER (WHERE k.worker_id = @worker_id::text), max(k.timeout_ms))
                 FROM tenure.kinds k WHERE k.kind = @kind::text), 0)::bigint AS timeout_ms;

-- name: WaitFinal :many
-- The given jobs that are in a final state, for jobs.Client.Wait (one statement for every
-- waiter the notification or the poll concerns).
SELECT * FROM tenure.jobs
WHERE id = ANY(@ids::bigint[]) AND state IN ('succeeded', 'dead', 'cancelled');

-- name: WaitMissing :many
-- The given ids no job has (deleted while waited for).
SELECT i.id::bigint AS id FROM unnest(@ids::bigint[]) AS i(id)
WHERE NOT EXISTS (SELECT 1 FROM tenure.jobs j WHERE j.id = i.id);

-- name: WaitAnnounce :one
-- jobs.Client.Wait announces the jobs it waits for that are not final yet on the await
-- channel (their ids, comma-separated, 350 per payload, as the done channel's), so that the
-- worker that runs or will run one writes its finish at once instead of lingering
-- (worker.Config.FinishLinger). Only latency depends on it: a lost announcement costs the
-- linger, never a wakeup. Returns the number of notifications.
SELECT count(pg_notify('tenure_await', c.ids))::bigint AS notified
FROM (SELECT string_agg(x.id::text, ',') AS ids
      FROM (SELECT j.id, row_number() OVER () AS rn FROM tenure.jobs j
            WHERE j.id = ANY(@ids::bigint[]) AND j.state NOT IN ('succeeded', 'dead', 'cancelled')) x
      GROUP BY (x.rn - 1) / 350) c;

-- name: Reinject :one
-- dead (or cancelled) -> ready with a fresh attempt budget. Generation keeps growing, so
-- fencing still holds against any worker of an earlier life of this job. Callers check the
-- state they allow first (Reinject: dead; Retry: dead or cancelled).
UPDATE tenure.jobs
SET state = 'ready', attempts = 0, run_at = now(), finished_at = NULL, claim_token = NULL,
    cancel_requested_at = NULL, updated_at = now(),
    max_attempts = coalesce(sqlc.narg(max_attempts)::integer, max_attempts)
WHERE id = @id AND state IN ('dead', 'cancelled')
RETURNING *;

-- name: UniqueHolder :one
-- The job other than id holding unique key key (through jobs_unique_idx), for an operator
-- action that would move job id back into its unique states.
SELECT id FROM tenure.jobs
WHERE unique_key = @key::bytea AND unique_key IS NOT NULL AND tenure.unique_state_held(unique_states, state)
  AND id <> @id::bigint;

-- name: RunNow :one
-- A ready job (scheduled, or waiting out a retry backoff) becomes due now.
UPDATE tenure.jobs
SET run_at = now(), updated_at = now()
WHERE id = @id AND state = 'ready'
RETURNING *;

-- name: DeleteJob :execrows
-- Deletes one job that is not running, with its effect-ledger rows.
WITH gone AS (
    DELETE FROM tenure.jobs WHERE id = @id AND state <> 'running' RETURNING id
), effects AS (
    DELETE FROM tenure.effects e WHERE e.job_id IN (SELECT id FROM gone)
), deps AS (
    DELETE FROM tenure.job_deps d WHERE d.dep_id IN (SELECT id FROM gone) OR d.job_id IN (SELECT id FROM gone)
), stripes AS (
    -- a striped dependent's counts (migration 0028)
    DELETE FROM tenure.job_dep_stripes s WHERE s.job_id IN (SELECT id FROM gone)
)
SELECT id FROM gone;

-- name: NotifyQueue :exec
-- The new-job signal for one job made ready by an operator (same payload as InsertJob's).
SELECT pg_notify('tenure_jobs', @queue::text || chr(31) || @priority::smallint || chr(31)
                                || (extract(epoch FROM @run_at::timestamptz) * 1000000)::bigint);

-- name: InsertAudit :one
INSERT INTO tenure.audit (actor, action, reason, job_id, detail)
VALUES (@actor, @action, @reason, sqlc.narg(job_id), @detail)
RETURNING *;

-- name: ListAudit :many
SELECT * FROM tenure.audit
WHERE (sqlc.narg(job_id)::bigint IS NULL OR job_id = sqlc.narg(job_id))
  AND id > @after_id
ORDER BY id
LIMIT @max_rows;

-- name: PruneFinishedBatch :one
-- One batch of retention pruning: succeeded and cancelled jobs finished before @before, oldest
-- first, at most @max_jobs, skipping rows another transaction holds. @after is the previous
-- batch's last finish time (a lower bound that lets the index scan start past the entries the
-- earlier batches' deleted rows leave behind until VACUUM). The same statement deletes the
-- effect-ledger rows of exactly the jobs it deleted (effects_job_name's index leads with
-- job_id), and the workflow and sequence edges of those jobs (tenure.job_deps). The DELETE
-- repeats the state and time conditions so a row that changed after it was
-- picked (a concurrent re-inject) is kept. Returns the counts and the latest finish time
-- deleted (@after when nothing was).
WITH picked AS (
    SELECT p.id FROM tenure.jobs p
    WHERE p.state IN ('succeeded', 'cancelled') AND p.finished_at < @before::timestamptz
      AND p.finished_at >= @after::timestamptz
    ORDER BY p.finished_at
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM tenure.jobs j
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
      AND j.state IN ('succeeded', 'cancelled') AND j.finished_at < @before::timestamptz
    RETURNING j.id, j.finished_at
), effects AS (
    DELETE FROM tenure.effects e
    WHERE e.job_id = ANY(ARRAY(SELECT id FROM gone))
    RETURNING e.job_id
), deps AS (
    -- the workflow and sequence edges into and out of the deleted jobs (migration 0020)
    DELETE FROM tenure.job_deps d
    WHERE d.dep_id = ANY(ARRAY(SELECT id FROM gone)) OR d.job_id = ANY(ARRAY(SELECT id FROM gone))
), stripes AS (
    -- the stripes of striped dependents cancelled while waiting (a release deletes its own;
    -- migration 0028)
    DELETE FROM tenure.job_dep_stripes s
    WHERE s.job_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT (SELECT count(*) FROM gone)::bigint AS jobs,
       (SELECT count(*) FROM effects)::bigint AS effects,
       coalesce((SELECT max(finished_at) FROM gone), @after::timestamptz)::timestamptz AS last_finished_at;

-- name: PruneDeadBatch :one
-- PruneFinishedBatch for dead jobs.
WITH picked AS (
    SELECT p.id FROM tenure.jobs p
    WHERE p.state = 'dead' AND p.finished_at < @before::timestamptz
      AND p.finished_at >= @after::timestamptz
    ORDER BY p.finished_at
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM tenure.jobs j
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
      AND j.state = 'dead' AND j.finished_at < @before::timestamptz
    RETURNING j.id, j.finished_at
), effects AS (
    DELETE FROM tenure.effects e
    WHERE e.job_id = ANY(ARRAY(SELECT id FROM gone))
    RETURNING e.job_id
), deps AS (
    -- the workflow and sequence edges into and out of the deleted jobs (migration 0020)
    DELETE FROM tenure.job_deps d
    WHERE d.dep_id = ANY(ARRAY(SELECT id FROM gone)) OR d.job_id = ANY(ARRAY(SELECT id FROM gone))
), stripes AS (
    -- the stripes of striped dependents cancelled while waiting (a release deletes its own;
    -- migration 0028)
    DELETE FROM tenure.job_dep_stripes s
    WHERE s.job_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT (SELECT count(*) FROM gone)::bigint AS jobs,
       (SELECT count(*) FROM effects)::bigint AS effects,
       coalesce((SELECT max(finished_at) FROM gone), @after::timestamptz)::timestamptz AS last_finished_at;

-- name: PruneSequencesBatch :one
-- One batch of the retention pruning of tenure.sequences: of the keys after @after (key
-- order, at most @max_keys, last written before @before), deletes those whose last job is gone
-- (pruned or deleted), so that the table holds only sequences with a job left. Such a key's
-- next insert finds no previous job either way (tenure.sequence_prev: a missing job is none)
-- and creates the row again. Rows another transaction holds (an insert into the key) are
-- skipped; a row whose last job changed after this statement's snapshot is kept (the lock's
-- recheck compares last_job_id with the value the snapshot saw, not the jobs the snapshot
-- cannot see). Returns the keys read, the rows deleted and the last key read (@after when none).
WITH scanned AS (
    SELECT s.key, s.last_job_id FROM tenure.sequences s
    WHERE s.key > @after::text AND s.updated_at < @before::timestamptz
    ORDER BY s.key
    LIMIT @max_keys
), idle AS (
    SELECT c.key, c.last_job_id FROM scanned c
    WHERE NOT EXISTS (SELECT 1 FROM tenure.jobs j WHERE j.id = c.last_job_id)
), locked AS (
    SELECT s.key FROM tenure.sequences s JOIN idle i ON s.key = i.key AND s.last_job_id = i.last_job_id
    FOR UPDATE OF s SKIP LOCKED
), gone AS (
    DELETE FROM tenure.sequences s WHERE s.key IN (SELECT l.key FROM locked l)
    RETURNING s.key
)
SELECT (SELECT count(*) FROM scanned)::bigint AS keys,
       (SELECT count(*) FROM gone)::bigint AS deleted,
       coalesce((SELECT max(c.key) FROM scanned c), @after::text)::text AS last_key;

-- name: TryLockSession :one
-- Takes a session-level advisory lock without waiting (held until UnlockSession or the end of
-- the session). The pruner holds locks.Prune this way across its many short transactions.
SELECT pg_try_advisory_lock(@lock_key::bigint)::boolean AS locked;

-- name: UnlockSession :one
SELECT pg_advisory_unlock(@lock_key::bigint)::boolean AS released;

-- ---------------------------------------------------------------------------------------------
-- Read side
-- ---------------------------------------------------------------------------------------------

-- name: GetJob :one
SELECT * FROM tenure.jobs WHERE id = @id;

-- name: ListJobs :many
-- Keyset paging by id. Empty filters match everything.
SELECT * FROM tenure.jobs
WHERE (sqlc.narg(state)::tenure.job_state IS NULL OR state = sqlc.narg(state)::tenure.job_state)
  AND (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
  AND (sqlc.narg(error_code)::text IS NULL OR last_error_code = sqlc.narg(error_code)::text)
  AND id > @after_id
ORDER BY id
LIMIT @max_rows;

-- name: ListJobsTagged :many
-- ListJobs restricted to jobs carrying every tag in tags (through jobs_tags_idx; tags is
-- never empty here, and the repeated predicate lets the planner use the partial index).
SELECT * FROM tenure.jobs
WHERE tags @> @tags::text[] AND tags <> '{}'
  AND (sqlc.narg(state)::tenure.job_state IS NULL OR state = sqlc.narg(state)::tenure.job_state)
  AND (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
  AND (sqlc.narg(error_code)::text IS NULL OR last_error_code = sqlc.narg(error_code)::text)
  AND id > @after_id
ORDER BY id
LIMIT @max_rows;

-- name: LiveStats :many
-- Per queue and priority: counts of live and dead jobs, and the ready backlog's age profile on
-- the database clock (ages in seconds; only jobs already due count as waiting).
SELECT queue, priority,
       count(*) FILTER (WHERE state = 'ready' AND run_at <= now())::bigint AS ready,
       count(*) FILTER (WHERE state = 'ready' AND run_at > now())::bigint  AS scheduled,
       count(*) FILTER (WHERE state = 'running')::bigint                    AS running,
       count(*) FILTER (WHERE state = 'running' AND cancel_requested_at IS NOT NULL)::bigint AS cancel_requested,
       count(*) FILTER (WHERE state = 'dead')::bigint                       AS dead,
       coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'ready' AND run_at <= now())), 0)::float8 AS oldest_ready_age_s,
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM now() - run_at))
                FILTER (WHERE state = 'ready' AND run_at <= now()), 0)::float8 AS ready_age_p50_s,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM now() - run_at))
                FILTER (WHERE state = 'ready' AND run_at <= now()), 0)::float8 AS ready_age_p95_s
FROM tenure.jobs
WHERE state IN ('ready', 'running', 'dead')
GROUP BY queue, priority
ORDER BY queue, priority DESC;

-- name: WaitStats :many
-- Queue wait (run_at -> claim) percentiles of jobs finished in the last window_us microseconds, per queue and priority.
SELECT queue, priority,
       count(*)::bigint AS finished,
       count(*) FILTER (WHERE state = 'succeeded')::bigint AS succeeded,
       coalesce(percentile_cont(0.5)  WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)), 0)::float8 AS wait_p50_s,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)), 0)::float8 AS wait_p95_s,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - run_at)), 0)::float8 AS wait_p99_s
FROM tenure.jobs
WHERE state IN ('succeeded', 'dead', 'cancelled') AND attempted_at IS NOT NULL
  AND finished_at >= now() - sqlc.arg(window_us)::bigint * interval '1 microsecond'
GROUP BY queue, priority
ORDER BY queue, priority DESC;

-- name: DeadErrorCodes :many
-- Top error codes of dead jobs.
SELECT queue, kind, coalesce(last_error_code, 'NONE')::text AS code, count(*)::bigint AS jobs
FROM tenure.jobs
WHERE state = 'dead'
GROUP BY queue, kind, last_error_code
ORDER BY jobs DESC
LIMIT @max_rows;

-- ---------------------------------------------------------------------------------------------
-- Effect ledger (docs/contract.md §7)
-- ---------------------------------------------------------------------------------------------

-- name: GetEffect :one
SELECT * FROM tenure.effects WHERE key = @key;

-- name: RecordEffect :one
-- Records an effect's result, fenced twice: only the job's current owner (state running, same
-- claim token) may write, and an existing row is only replaced by a newer generation.
-- An effect whose result cannot be kept is recorded all the same, with result null and why in
-- refused: it ran, and must not run again. No row returned = the write was refused.
INSERT INTO tenure.effects (key, job_id, name, generation, result, refused)
SELECT @key::text, @job_id::bigint, @name::text, @generation::bigint, @result::jsonb, nullif(@refused::text, '')
WHERE EXISTS (SELECT 1 FROM tenure.jobs j
              WHERE j.id = @job_id::bigint AND j.state = 'running' AND j.claim_token = @claim_token::uuid)
ON CONFLICT (key) DO UPDATE
SET result = excluded.result, refused = excluded.refused, generation = excluded.generation, updated_at = now()
WHERE tenure.effects.generation < excluded.generation
RETURNING *;

-- ---------------------------------------------------------------------------------------------
-- Engine bookkeeping
-- ---------------------------------------------------------------------------------------------

-- name: TxStatus :one
-- Whether the transaction xid (txid_current) committed: 'committed', 'aborted', 'in progress',
-- or NULL when it is too old to tell. The engine asks it about the application's transaction
-- that ran CompleteOne with delete, whose row no longer exists to tell.
SELECT coalesce(txid_status(@xid::bigint), '')::text AS status;

-- name: FinishStates :many
-- After a finish write whose reply was lost, the engine reads back the rows the retry did not
-- change, to tell "my earlier write landed" from "someone else owns the job now".
SELECT id, state, claim_token, generation, errors FROM tenure.jobs WHERE id = ANY(@ids::bigint[]);

-- ---------------------------------------------------------------------------------------------
-- Worker registry (SPEC section 9)
-- ---------------------------------------------------------------------------------------------

-- name: RegisterWorker :one
-- A worker's registry heartbeat: upserts its row and, in the same statement, deletes the rows
-- of other workers that expired (killed processes). SKIP LOCKED: concurrent workers never wait
-- for each other's deletes (no deadlock between two workers aging out the same rows).
WITH aged AS (
    DELETE FROM tenure.workers
    WHERE id IN (SELECT w.id FROM tenure.workers w
                 WHERE w.expires_at < now() AND w.id <> sqlc.arg(id)::text
                 FOR UPDATE SKIP LOCKED)
    RETURNING id
), up AS (
    INSERT INTO tenure.workers (id, host, pid, version, queues, started_at, heartbeat_at, expires_at, last_success_at, counters)
    VALUES (sqlc.arg(id)::text, sqlc.arg(host)::text, sqlc.arg(pid)::integer, sqlc.arg(version)::text, sqlc.arg(queues)::jsonb, sqlc.arg(started_at)::timestamptz, now(),
            now() + sqlc.arg(ttl_ms)::bigint * interval '1 millisecond', sqlc.narg(last_success_at)::timestamptz, sqlc.arg(counters)::jsonb)
    ON CONFLICT (id) DO UPDATE
    SET heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at,
        last_success_at = excluded.last_success_at, counters = excluded.counters, queues = excluded.queues
    RETURNING id
)
SELECT (SELECT count(*) FROM aged)::bigint AS aged;

-- name: DeregisterWorker :execrows
DELETE FROM tenure.workers WHERE id = @id::text;

-- name: ListWorkers :many
-- Every registered worker with its heartbeat age on the database clock.
SELECT id, host, pid, version, queues, started_at, heartbeat_at, expires_at, last_success_at, counters,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age_s,
       (expires_at < now())::boolean AS expired
FROM tenure.workers
ORDER BY id;

-- ---------------------------------------------------------------------------------------------
-- Periodic schedules (worker/periodic.go; migration 0006). Each tick is enqueued at most once:
-- PeriodicAdvance moves next_run_at from the tick to the next one only if it still holds the
-- tick (and skips a row another worker has locked), and the job is inserted in that same
-- transaction.
-- ---------------------------------------------------------------------------------------------

-- name: DatabaseNow :one
SELECT now()::timestamptz AS now;

-- name: PeriodicUpsert :one
-- Registers a schedule at worker start. An existing row keeps its next tick unless its spec
-- changed (then the schedule restarts at the new spec's first tick, @next_run_at).
INSERT INTO tenure.periodic (name, spec, kind, queue, next_run_at)
VALUES (@name, @spec, @kind, @queue, @next_run_at)
ON CONFLICT (name) DO UPDATE
SET spec        = excluded.spec,
    kind        = excluded.kind,
    queue       = excluded.queue,
    next_run_at = CASE WHEN periodic.spec = excluded.spec THEN periodic.next_run_at ELSE excluded.next_run_at END,
    updated_at  = now()
WHERE periodic.spec <> excluded.spec OR periodic.kind <> excluded.kind OR periodic.queue <> excluded.queue
RETURNING next_run_at;

-- name: PeriodicDue :many
-- The next tick of each named schedule, with the database clock.
SELECT name, next_run_at, now()::timestamptz AS db_now
FROM tenure.periodic WHERE name = ANY(@names::text[])
ORDER BY name;

-- name: PeriodicAdvance :one
-- Moves a schedule from tick @tick to @next_run_at, if it is still at @tick and no other
-- worker holds the row. No row: another worker took (or is taking) this tick.
UPDATE tenure.periodic
SET next_run_at      = @next_run_at,
    last_tick_at     = @tick,
    last_enqueued_at = CASE WHEN sqlc.arg(enqueue)::boolean THEN now() ELSE periodic.last_enqueued_at END,
    missed           = periodic.missed + sqlc.arg(missed)::bigint,
    updated_at       = now()
WHERE periodic.name = (SELECT c.name FROM tenure.periodic c
                WHERE c.name = @name AND c.next_run_at = @tick
                FOR UPDATE SKIP LOCKED)
RETURNING periodic.name;

-- name: PeriodicRunOnStart :one
-- A worker's run-on-start tick: taken only if nothing was enqueued for the schedule within
-- @gap_us (the row lock serializes workers starting together; the later ones see the first's
-- last_enqueued_at). No row: not taken.
UPDATE tenure.periodic
SET last_enqueued_at = now(),
    last_tick_at     = now(),
    updated_at       = now()
WHERE periodic.name = @name
  AND (periodic.last_enqueued_at IS NULL OR periodic.last_enqueued_at <= now() - sqlc.arg(gap_us)::bigint * interval '1 microsecond')
RETURNING periodic.last_tick_at;

-- name: PeriodicSetJob :exec
UPDATE tenure.periodic SET last_job_id = @job_id WHERE name = @name;

-- name: ListPeriodic :many
SELECT name, spec, kind, queue, next_run_at, last_tick_at, last_enqueued_at, last_job_id, missed,
       created_at, updated_at, now()::timestamptz AS db_now
FROM tenure.periodic ORDER BY name;

-- ---------------------------------------------------------------------------------------------
-- Queue pause (jobs/queues.go, worker/pause.go; migration 0006). Workers read the paused set at
-- Start, on every NOTIFY tenure_queues (sent by SetQueuePaused's transaction) and on a poll.
-- ---------------------------------------------------------------------------------------------

-- name: LockQueueState :many
SELECT paused FROM tenure.queues WHERE name = @name FOR UPDATE;

-- name: SetQueuePaused :one
INSERT INTO tenure.queues AS q (name, paused, paused_at, updated_by, reason)
VALUES (@name, @paused::boolean, CASE WHEN @paused::boolean THEN now() END, @actor, @reason)
ON CONFLICT (name) DO UPDATE
SET paused     = excluded.paused,
    paused_at  = CASE WHEN NOT excluded.paused THEN NULL ELSE coalesce(q.paused_at, now()) END,
    updated_by = excluded.updated_by,
    reason     = excluded.reason,
    updated_at = now()
RETURNING q.name, q.paused, q.paused_at, q.updated_by, q.reason, q.updated_at;

-- name: NotifyQueueState :exec
SELECT pg_notify('tenure_queues', @queue::text);

-- name: PausedQueues :many
SELECT name FROM tenure.queues WHERE paused AND name = ANY(@names::text[]) ORDER BY name;

-- name: ListQueueStates :many
-- Queues an operator acted on, or that a live worker serves, with their pause state and the
-- number of live workers serving each.
WITH names AS (
    SELECT name FROM tenure.queues
    UNION
    SELECT jsonb_object_keys(w.queues) FROM tenure.workers w WHERE w.expires_at > now()
)
SELECT n.name::text AS name, coalesce(q.paused, false) AS paused, q.paused_at, q.updated_by, q.reason, q.updated_at,
       (SELECT count(*) FROM tenure.workers w WHERE w.expires_at > now() AND w.queues ? n.name)::integer AS workers
FROM names n LEFT JOIN tenure.queues q ON q.name = n.name
ORDER BY n.name;

-- name: PermitRelease :exec
-- Permits: a worker that stops gracefully gives its shares back (its jobs have ended or been
-- released by then). Lowering an amount never needs the queue's lock: every allocation counts a
-- worker's running jobs whatever its row says (worker/permits.go).
DELETE FROM tenure.flow_permit WHERE worker_id = @worker_id::text;

-- name: PublishKinds :exec
-- Kind defaults (migration 0018): a worker publishes the defaults of the kinds it registers
-- (one array element per kind) at Start
-- and with every registry heartbeat. An unchanged row is not rewritten (published_at is when
-- its values last changed). The same statement deletes the rows other workers published for
-- these kinds if those workers are no longer live (SKIP LOCKED: publishers never wait for each
-- other); rows of kinds nobody publishes any more stay, so tenure.enqueue keeps their defaults.
WITH input AS (
    SELECT unnest(sqlc.arg(kinds)::text[]) AS kind, unnest(sqlc.arg(queues)::text[]) AS queue,
           unnest(sqlc.arg(priorities)::smallint[]) AS priority, unnest(sqlc.arg(max_attempts)::integer[]) AS max_attempts,
           unnest(sqlc.arg(lease_ms)::integer[]) AS lease_ms, unnest(sqlc.arg(timeout_ms)::bigint[]) AS timeout_ms,
           unnest(sqlc.arg(delete_on_success)::boolean[]) AS delete_on_success
), pruned AS (
    DELETE FROM tenure.kinds
    WHERE (kind, worker_id) IN (
        SELECT t.kind, t.worker_id FROM tenure.kinds t
        WHERE t.kind IN (SELECT i.kind FROM input i) AND t.worker_id <> sqlc.arg(worker_id)::text
          AND NOT EXISTS (SELECT 1 FROM tenure.workers w WHERE w.id = t.worker_id AND w.expires_at > now())
        FOR UPDATE OF t SKIP LOCKED)
)
INSERT INTO tenure.kinds AS t (kind, worker_id, queue, priority, max_attempts, lease_ms, timeout_ms, delete_on_success)
SELECT i.kind, sqlc.arg(worker_id)::text, i.queue, i.priority, i.max_attempts, i.lease_ms, i.timeout_ms, i.delete_on_success FROM input i
ON CONFLICT (kind, worker_id) DO UPDATE
SET queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts,
    lease_ms = excluded.lease_ms, timeout_ms = excluded.timeout_ms, delete_on_success = excluded.delete_on_success,
    published_at = now()
WHERE (t.queue, t.priority, t.max_attempts, t.lease_ms, t.timeout_ms, t.delete_on_success)
      IS DISTINCT FROM (excluded.queue, excluded.priority, excluded.max_attempts, excluded.lease_ms, excluded.timeout_ms,
                        excluded.delete_on_success);

-- name: DeleteOnSuccessKinds :many
-- The kinds some worker published with delete on success (tenure.kinds.delete_on_success,
-- migration 0024): their succeeded jobs leave no row, so Stats' succeeded counts miss them.
-- Rows of workers no longer live count too until a live publisher of the kind prunes them.
SELECT DISTINCT k.kind FROM tenure.kinds k WHERE k.delete_on_success ORDER BY k.kind LIMIT sqlc.arg(max_rows)::int;

-- name: UnservedJobs :many
-- Ready jobs (due or scheduled) that no live worker can run, per queue, priority and kind: no
-- live worker (tenure.workers, not expired) both serves the queue and registers the kind
-- (tenure.kinds). queue_served and kind_registered say which half is missing.
WITH live AS (
    SELECT w.id, w.queues FROM tenure.workers w WHERE w.expires_at > now()
), groups AS (
    SELECT j.queue, j.priority, j.kind, count(*)::bigint AS ready
    FROM tenure.jobs j
    WHERE j.state = 'ready'
    GROUP BY j.queue, j.priority, j.kind
)
SELECT g.queue, g.priority, g.kind, g.ready,
       EXISTS (SELECT 1 FROM live l WHERE (l.queues -> g.queue) IS NOT NULL)::boolean AS queue_served,
       EXISTS (SELECT 1 FROM live l JOIN tenure.kinds k ON k.worker_id = l.id WHERE k.kind = g.kind)::boolean AS kind_registered
FROM groups g
WHERE NOT EXISTS (SELECT 1 FROM live l JOIN tenure.kinds k ON k.worker_id = l.id
                  WHERE k.kind = g.kind AND (l.queues -> g.queue) IS NOT NULL)
ORDER BY g.ready DESC, g.queue, g.priority DESC, g.kind
LIMIT sqlc.arg(max_rows)::int;

-- name: ServedQueues :many
-- The queues some live worker serves (its registry row's queues, not expired).
SELECT DISTINCT q::text AS queue
FROM tenure.workers w, jsonb_object_keys(w.queues) AS q
WHERE w.expires_at > now()
ORDER BY 1;

-- ---------------------------------------------------------------------------------------------
-- Workflows and sequences (migration 0020; docs/design.md "Workflows and sequences"). A job
-- that waits for others is inserted 'waiting' with its count of dependencies and its edges;
-- the trigger jobs_settle_dependents releases or cancels it in the transaction of its last
-- dependency's final transition.
-- ---------------------------------------------------------------------------------------------

-- name: InsertFlowJobs :many
-- InsertJobs for the jobs of a workflow, or one job of a sequence: each row also carries its
-- initial state ('ready' or 'waiting'), its count of dependencies, whether jobs depend on it,
-- its workflow id (the zero uuid: none), task name and sequence key ('': none). The new-job
-- signal goes only to due ready rows. Returns the inserted rows in id order (the input order).
-- new_workflow_id (the zero uuid: none) is the workflow the statement begins: its row in
-- tenure.workflows is written in the same statement, and an id already taken fails the whole
-- statement with a unique violation on workflows_pkey (migration 0031), inserting nothing.
WITH wf AS (
    INSERT INTO tenure.workflows (id)
    SELECT @new_workflow_id::uuid WHERE @new_workflow_id::uuid <> '00000000-0000-0000-0000-000000000000'::uuid
), ins AS (
INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata, tags,
                         state, deps_pending, has_dependents, workflow_id, task_name, sequence_key)
SELECT i.queue, i.kind, i.payload, i.payload_version, i.priority,
       CASE WHEN i.run_at_us <> 0 THEN 'epoch'::timestamptz + i.run_at_us * interval '1 microsecond'
            ELSE now() + i.delay_us * interval '1 microsecond' END,
       i.max_attempts, i.lease_ms, i.metadata, CASE WHEN i.tags = '[]'::jsonb THEN '{}'::text[] ELSE ARRAY(SELECT jsonb_array_elements_text(i.tags)) END,
       i.state::tenure.job_state, i.deps_pending, i.has_dependents,
       nullif(i.workflow_id, '00000000-0000-0000-0000-000000000000'::uuid), nullif(i.task_name, ''), nullif(i.sequence_key, '')
FROM (SELECT unnest(@queues::text[]) AS queue,
            unnest(@kinds::text[]) AS kind,
            unnest(@payloads::jsonb[]) AS payload,
            unnest(@payload_versions::integer[]) AS payload_version,
            unnest(@priorities::smallint[]) AS priority,
            unnest(@run_at_us::bigint[]) AS run_at_us,
            unnest(@delay_us::bigint[]) AS delay_us,
            unnest(@max_attempts::integer[]) AS max_attempts,
            unnest(@lease_ms::integer[]) AS lease_ms,
            unnest(@metadata::jsonb[]) AS metadata,
            unnest(@tags::jsonb[]) AS tags,
            unnest(@states::text[]) AS state,
            unnest(@deps_pending::integer[]) AS deps_pending,
            unnest(@has_dependents::boolean[]) AS has_dependents,
            unnest(@workflow_ids::uuid[]) AS workflow_id,
            unnest(@task_names::text[]) AS task_name,
            unnest(@sequence_keys::text[]) AS sequence_key) AS i
RETURNING *
)
SELECT ins.* FROM ins
WHERE (SELECT count(*) FROM (SELECT pg_notify('tenure_jobs', d.queue || chr(31) || d.priority || chr(31)
                                              || (extract(epoch FROM d.run_at) * 1000000)::bigint)
                             FROM (SELECT queue, priority, min(run_at) AS run_at FROM ins
                                   WHERE state = 'ready' AND run_at <= now()
                                   GROUP BY queue, priority) d) n) >= 0
ORDER BY id;

-- name: InsertDeps :exec
-- The edges of waiting jobs: job_ids[i] waits for dep_ids[i], with on_failure[i] ('cancel',
-- 'run' or 'block'); a dependent of 32 edges or more gets its count in stripes
-- (tenure.insert_deps, migration 0028): pass all the edges of a dependent in one call.
SELECT tenure.insert_deps(@dep_ids::bigint[], @job_ids::bigint[], @on_failure::text[]);

-- name: SequencePrev :one
-- The job a new job of the sequence must wait for (0: none), with the key's row locked until
-- the transaction ends (tenure.sequence_prev).
SELECT tenure.sequence_prev(@key::text, @on_failure::text)::bigint AS prev;

-- name: SequenceSetLast :exec
-- Records the sequence's newest job (after SequencePrev, in the same transaction).
UPDATE tenure.sequences SET last_job_id = @job_id::bigint, updated_at = now() WHERE key = @key::text;

-- name: SequencePrevMany :many
-- SequencePrev for several keys (InsertMany), called in the order given (callers sort the
-- keys, so two transactions taking the same keys take them in the same order and cannot
-- deadlock); on_failure[i] is the policy of the first new job of keys[i].
SELECT k.key::text AS key, tenure.sequence_prev(k.key, k.on_failure)::bigint AS prev
FROM (SELECT unnest(@keys::text[]) AS key, unnest(@on_failure::text[]) AS on_failure) AS k;

-- name: SequenceSetLastMany :exec
-- SequenceSetLast for several keys (after SequencePrevMany, in the same transaction).
UPDATE tenure.sequences s SET last_job_id = v.job_id, updated_at = now()
FROM (SELECT unnest(@keys::text[]) AS key, unnest(@job_ids::bigint[]) AS job_id) AS v
WHERE s.key = v.key;

-- name: PruneWorkflowsBatch :one
-- One batch of the retention pruning of tenure.workflows: of the workflows after @after (id
-- order, at most @max_rows, created before @before), deletes those with no task left (pruned
-- or deleted), so that the table holds only workflows with a task and a pruned workflow's id
-- may be used again. A workflow's tasks are inserted with its row, in one transaction, and a
-- taken id refuses a second insert, so no task can arrive for a row this deletes. Returns the
-- rows read, the rows deleted and the last id read (@after when none).
WITH scanned AS (
    SELECT w.id FROM tenure.workflows w
    WHERE w.id > @after::uuid AND w.created_at < @before::timestamptz
    ORDER BY w.id
    LIMIT @max_rows
), gone AS (
    DELETE FROM tenure.workflows w
    WHERE w.id IN (SELECT c.id FROM scanned c)
      AND NOT EXISTS (SELECT 1 FROM tenure.jobs j WHERE j.workflow_id = w.id)
    RETURNING w.id
)
SELECT (SELECT count(*) FROM scanned)::bigint AS rows_read,
       (SELECT count(*) FROM gone)::bigint AS deleted,
       coalesce((SELECT c.id FROM scanned c ORDER BY c.id DESC LIMIT 1), @after::uuid)::uuid AS last_id;

-- name: WorkflowJobs :many
-- The tasks of a workflow, in insertion order.
SELECT * FROM tenure.jobs WHERE workflow_id = @workflow_id::uuid ORDER BY id;

-- name: WorkflowEdges :many
-- The edges between a workflow's tasks: job_id waits for dep_id.
SELECT d.dep_id, d.job_id, d.on_failure, d.resolved
FROM tenure.job_deps d
WHERE d.job_id IN (SELECT j.id FROM tenure.jobs j WHERE j.workflow_id = @workflow_id::uuid)
ORDER BY d.job_id, d.dep_id;

-- name: CancelWorkflowPending :many
-- Cancels a workflow's tasks that have not started (ready or waiting), at once. Their
-- dependents are settled by the trigger (here: all cancelled by this statement already).
UPDATE tenure.jobs
SET state = 'cancelled', finished_at = now(), cancel_requested_at = now(), updated_at = now()
WHERE workflow_id = @workflow_id::uuid AND state IN ('ready', 'waiting')
RETURNING id;

-- name: RequestCancelWorkflow :many
-- Asks the owners of a workflow's running tasks to cancel them (RequestCancel for each).
UPDATE tenure.jobs
SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
WHERE workflow_id = @workflow_id::uuid AND state = 'running'
RETURNING id;

-- name: DependencyOutput :one
-- The state and output of the dependency named task_name of job id (within its workflow, and
-- one of the job's own dependencies).
SELECT d.id, d.state, d.output
FROM tenure.jobs me
JOIN tenure.jobs d ON d.workflow_id = me.workflow_id AND d.task_name = @task_name::text
JOIN tenure.job_deps e ON e.dep_id = d.id AND e.job_id = me.id
WHERE me.id = @id::bigint;

-- name: SequenceJobs :many
-- The jobs of a sequence, in order.
SELECT * FROM tenure.jobs WHERE sequence_key = @key::text ORDER BY id;
