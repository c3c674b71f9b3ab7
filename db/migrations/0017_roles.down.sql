-- Reverts 0017_roles: drops the grant functions. The privileges they granted stay (REVOKE them
-- by hand if wanted).
DROP FUNCTION IF EXISTS tenure.grant_operator(name);
DROP FUNCTION IF EXISTS tenure.grant_worker(name);
DROP FUNCTION IF EXISTS tenure.grant_enqueuer(name);
DROP FUNCTION IF EXISTS tenure.grant_reader(name);
DROP FUNCTION IF EXISTS tenure.grant_privileges(name, text[]);
