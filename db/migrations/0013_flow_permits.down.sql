-- Reverts 0013_flow_permits.
DROP TABLE IF EXISTS tenure.flow_permit;
