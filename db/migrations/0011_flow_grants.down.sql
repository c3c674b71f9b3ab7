-- Reverts 0011_flow_grants.
DROP TABLE IF EXISTS tenure.flow_grant;
