-- The transactional outbox to NATS JetStream and the effect ledger of JetStream jobs (package
-- tenurenats). Both are only used by tenurenats; a database that never relays to NATS keeps
-- them empty.

-- One message to publish, written in the business transaction (tenurenats.Publish). A relay
-- claims pending rows (sent_at IS NULL, no live claim) with a fresh claim_token and a lease,
-- publishes them with msg_id as Nats-Msg-Id, and marks them sent only where its token still
-- matches (fenced). claimed_until doubles as "not before" after a failed publish.
CREATE TABLE tenure.outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    msg_id        text        NOT NULL,
    subject       text        NOT NULL,
    payload       bytea       NOT NULL,
    headers       jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    claimed_by    text,
    claim_token   uuid,
    claimed_until timestamptz,
    last_error    text,
    sent_at       timestamptz,
    stream        text,
    stream_seq    bigint,

    CONSTRAINT outbox_msg_id_unique UNIQUE (msg_id),
    CONSTRAINT outbox_msg_id_len    CHECK (char_length(msg_id) BETWEEN 1 AND 200),
    CONSTRAINT outbox_subject_len   CHECK (char_length(subject) BETWEEN 1 AND 255),
    CONSTRAINT outbox_payload_size  CHECK (octet_length(payload) <= 8388608),
    CONSTRAINT outbox_headers       CHECK (jsonb_typeof(headers) = 'object' AND pg_column_size(headers) <= 65536),
    CONSTRAINT outbox_error_len     CHECK (char_length(last_error) <= 2000),
    CONSTRAINT outbox_sent          CHECK ((sent_at IS NULL) = (stream_seq IS NULL))
);

-- Pending rows in id order: the relay's claim reads only this index's range.
CREATE INDEX outbox_pending_idx ON tenure.outbox (id) WHERE sent_at IS NULL;
-- Sent rows by send time: retention pruning.
CREATE INDEX outbox_sent_idx ON tenure.outbox (sent_at) WHERE sent_at IS NOT NULL;

-- Effect ledger of jobs consumed from JetStream (tenurenats.Worker). Keyed like tenure.effects
-- (the key carries the stream name, see tenurenats' doc), but without a job row to fence on:
-- the first attempt to record a key wins and later attempts read its result.
CREATE TABLE tenure.stream_effects (
    key         text        PRIMARY KEY,
    stream      text        NOT NULL,
    seq         bigint      NOT NULL,
    name        text        NOT NULL,
    generation  bigint      NOT NULL,
    result      jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT stream_effects_name_len    CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT stream_effects_result_size CHECK (pg_column_size(result) <= 65536)
);

CREATE INDEX stream_effects_created_idx ON tenure.stream_effects (created_at);
