-- 011_rules_role.sql — the role of the rules' queries (crier.query): crier_rules,
-- an unprivileged login role that reads only the application data the operator
-- grants it (GRANT USAGE ON SCHEMA app TO crier_rules; GRANT SELECT ON app.t TO
-- crier_rules). Rule queries never run as crier's own role, which owns schema
-- crier and its secrets (and is a superuser in many installations): a READ ONLY
-- transaction stops neither COPY … TO PROGRAM nor pg_read_file nor a SELECT of
-- crier.api_tenants. The name is also CRIER_RULES_ROLE in src/pg/database.h.
--
-- Roles belong to the cluster, not the database: the role is created once, by
-- the first migration run with the right to (a superuser or a role with
-- CREATEROLE). Otherwise this says how to create it and goes on: crier serve
-- then warns that rules that query cannot connect until it exists.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'crier_rules') THEN
        BEGIN
            CREATE ROLE crier_rules LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOINHERIT;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'crier migrate may not create the role of rule queries (crier_rules)'
                USING HINT = 'as a superuser: CREATE ROLE crier_rules LOGIN PASSWORD ''…''; then give crier serve '
                             '--rules-database ''… user=crier_rules password=…''';
        END;
    END IF;
END
$$;

-- Nothing of schema crier is anyone else's: crier's own role uses it as owner.
REVOKE ALL ON SCHEMA crier FROM PUBLIC;
