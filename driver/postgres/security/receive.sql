-- The least privileges of a receive daemon (`mensageria receive`) of app
-- {{app}}, granted to role {{role}} (docs/security.md). {{schema}} is the
-- schema.
--
-- What it does with them: checks the schema version (without --migrate),
-- registers its consumers in the catalog, stores each delivery's dedup
-- record and inbox queue row in one transaction, reports the queue in
-- /metrics and purges its consumers' applied rows and records. It never
-- reads or writes the outbox.
GRANT USAGE ON SCHEMA {{schema}} TO {{role}};
GRANT SELECT ON {{schema}}.schema_migrations, {{schema}}.outbox_identity TO {{role}};
GRANT SELECT, INSERT, UPDATE ON {{schema}}.owners TO {{role}};
GRANT SELECT, INSERT, DELETE ON {{schema}}.inbox TO {{role}};
-- INSERT ... RETURNING id needs SELECT; the purge locks what it deletes.
GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.inbox_queue TO {{role}};
INSERT INTO {{schema}}.app_roles (role, app, writes) VALUES ('{{role}}', '{{app}}', true)
ON CONFLICT (role, app) DO UPDATE SET writes = true;
