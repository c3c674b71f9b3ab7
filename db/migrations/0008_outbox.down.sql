-- Reverts 0008_outbox.
DROP TABLE IF EXISTS tenure.stream_effects;
DROP TABLE IF EXISTS tenure.outbox;
