-- The least privileges of an SQL producer of app {{app}} (a Java, Python
-- or psql INSERT into the outbox, or a Go app's Enqueue), granted to role
-- {{role}} (docs/security.md). {{schema}} is the schema.
--
-- INSERT only: the enqueue trigger reads the catalog with the rights of
-- the role that migrated, and its sequences are granted to PUBLIC by their
-- migrations. SELECT on owners lets the row-level security policies, which
-- run with the producer's rights, find its app's types; the catalog holds
-- no payload.
GRANT USAGE ON SCHEMA {{schema}} TO {{role}};
GRANT INSERT ON {{schema}}.outbox TO {{role}};
GRANT SELECT ON {{schema}}.owners TO {{role}};
INSERT INTO {{schema}}.app_roles (role, app, writes) VALUES ('{{role}}', '{{app}}', true)
ON CONFLICT (role, app) DO UPDATE SET writes = true;
