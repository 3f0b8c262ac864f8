-- api_random_secret.sql — crier.api_random_secret: a new tenant secret: 32 bytes from the
-- server's strong random source (pg_strong_random behind gen_random_uuid: two version-4
-- uuids, 244 random bits). It is the default of crier.api_tenants.secret, set here (after
-- the function) so that the table's migration (006_api.sql) needs no function to exist.
CREATE OR REPLACE FUNCTION crier.api_random_secret() RETURNS bytea LANGUAGE sql VOLATILE AS $$
    SELECT decode(replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''), 'hex')
$$;

ALTER TABLE crier.api_tenants ALTER COLUMN secret SET DEFAULT crier.api_random_secret();
