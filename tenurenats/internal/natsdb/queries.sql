-- The statements of tenurenats (the outbox relay and JetStream effect ledger), its own. sqlc generates package
-- natsdb from this file and the core's db/schema.sql (the root sqlc.yaml; make generate, make
-- check-generated). The core's statements (db/queries.sql, db/gen) are not an API: tenurenats
-- uses the core through its public packages, and these statements change with tenurenats.

-- ---------------------------------------------------------------------------------------------
-- Outbox to NATS JetStream and the ledger of JetStream jobs (package tenurenats, migration 0008)
-- ---------------------------------------------------------------------------------------------

-- name: OutboxInsert :one
-- One message to publish, in the caller's transaction (tenurenats.Publish).
INSERT INTO tenure.outbox (msg_id, subject, payload, headers)
VALUES (@msg_id::text, @subject::text, @payload::bytea, @headers::jsonb)
RETURNING id;

-- name: OutboxClaim :many
-- Claims up to @batch pending rows, oldest first, for one relay: a fresh claim token and a
-- lease on the database clock, committed by this autocommitted statement. Rows another relay
-- holds (live lease) or that wait out a failed publish's delay (claimed_until in the future)
-- are skipped; SKIP LOCKED keeps concurrent relays from waiting on each other.
WITH picked AS (
    SELECT o.id FROM tenure.outbox o
    WHERE o.sent_at IS NULL AND (o.claimed_until IS NULL OR o.claimed_until <= now())
    ORDER BY o.id
    FOR UPDATE SKIP LOCKED
    LIMIT @batch::int
)
UPDATE tenure.outbox o
SET claim_token = @claim_token::uuid, claimed_by = @claimed_by::text,
    claimed_until = now() + make_interval(secs => @lease_s::float8), attempts = o.attempts + 1
FROM picked WHERE o.id = picked.id
RETURNING o.id, o.msg_id, o.subject, o.payload, o.headers, o.attempts;

-- name: OutboxMarkSent :many
-- Fenced: marks the published rows sent only while this relay's claim still holds them (same
-- token, not sent). Returns the ids it changed; a missing id means another relay took the row
-- over after this claim's lease ran out (JetStream drops its duplicate by Nats-Msg-Id).
UPDATE tenure.outbox o
SET sent_at = now(), stream = u.stream, stream_seq = u.seq, claim_token = NULL, claimed_by = NULL,
    claimed_until = NULL, last_error = NULL
FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@streams::text[]) AS stream,
             unnest(@seqs::bigint[]) AS seq) AS u
WHERE o.id = u.id AND o.claim_token = @claim_token::uuid AND o.sent_at IS NULL
RETURNING o.id;

-- name: OutboxRetryLater :execrows
-- Fenced: a publish failed; the row becomes claimable again after @delay_s seconds.
UPDATE tenure.outbox
SET claimed_until = now() + make_interval(secs => @delay_s::float8), last_error = @last_error::text
WHERE id = @id::bigint AND claim_token = @claim_token::uuid AND sent_at IS NULL;

-- name: OutboxPruneSent :execrows
-- Deletes up to @batch rows sent before @before (retention), oldest first.
DELETE FROM tenure.outbox
WHERE id IN (SELECT id FROM tenure.outbox WHERE sent_at < @before::timestamptz
             ORDER BY sent_at LIMIT @batch::int FOR UPDATE SKIP LOCKED);

-- name: OutboxPending :one
-- Rows not sent yet, and the oldest one's age in seconds on the database clock.
SELECT count(*)::bigint AS pending,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_s
FROM tenure.outbox WHERE sent_at IS NULL;

-- name: StreamEffectGet :one
SELECT key, generation, result, refused FROM tenure.stream_effects WHERE key = @key::text;

-- name: StreamEffectRecord :one
-- Records a JetStream job's effect result (or, with refused, that it ran but its result could
-- not be kept) unless the key has a record already; either way returns the record that holds
-- (the first attempt to record wins).
WITH ins AS (
    INSERT INTO tenure.stream_effects (key, stream, seq, name, generation, result, refused)
    VALUES (@key::text, @stream::text, @seq::bigint, @name::text, @generation::bigint, @result::jsonb, nullif(@refused::text, ''))
    ON CONFLICT (key) DO NOTHING
    RETURNING generation, result, refused
)
SELECT generation, result, refused FROM ins
UNION ALL
SELECT e.generation, e.result, e.refused FROM tenure.stream_effects e
WHERE e.key = @key::text AND NOT EXISTS (SELECT 1 FROM ins);

-- name: StreamEffectPrune :execrows
-- Deletes up to @batch ledger rows of JetStream jobs recorded before @before.
DELETE FROM tenure.stream_effects
WHERE key IN (SELECT key FROM tenure.stream_effects WHERE created_at < @before::timestamptz
              ORDER BY created_at LIMIT @batch::int FOR UPDATE SKIP LOCKED);
