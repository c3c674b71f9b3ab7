-- Reverts 0019_own: no tenure.own (the claim statements of the previous release write
-- ownership themselves).
DROP FUNCTION IF EXISTS tenure.own(bigint[], text, text[], integer[], text[], timestamptz);
