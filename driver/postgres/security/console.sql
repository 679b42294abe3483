-- The least privileges of a web console (`mensageria console`) acting for
-- app {{app}}, granted to role {{role}} (docs/security.md). {{schema}} is
-- the schema.
--
-- What it does with them: reads every app's counts, messages, routes,
-- elections and resolutions (the console shows them all, as `status`
-- does), retries and discards {{app}}'s dead letters, resolves its
-- messages in doubt, and pauses and resumes its routes. A read_only
-- console needs none of the INSERT, UPDATE and DELETE grants. With
-- row-level security it reads every app ('*' below) and writes {{app}}'s
-- rows only, whatever its all_apps setting says; a console that acts for
-- more apps gets a row per app in app_roles.
GRANT USAGE ON SCHEMA {{schema}} TO {{role}};
GRANT SELECT ON {{schema}}.schema_migrations, {{schema}}.outbox_identity, {{schema}}.owners,
    {{schema}}.leader, {{schema}}.route_state, {{schema}}.delivered_counts,
    {{schema}}.inbox_queue, {{schema}}.resolutions, {{schema}}.route_pause TO {{role}};
-- Pausing a route is an INSERT (or an UPDATE of a paused one), resuming
-- it a DELETE.
GRANT INSERT, UPDATE, DELETE ON {{schema}}.route_pause TO {{role}};
-- Dead retry is an UPDATE, discard a DELETE; resolving a message in doubt
-- updates or deletes it, counts it and records the decision.
GRANT SELECT, UPDATE, DELETE ON {{schema}}.outbox TO {{role}};
GRANT SELECT, INSERT ON {{schema}}.delivered_counts_log, {{schema}}.resolutions TO {{role}};
INSERT INTO {{schema}}.app_roles (role, app, writes) VALUES ('{{role}}', '{{app}}', true), ('{{role}}', '*', false)
ON CONFLICT (role, app) DO UPDATE SET writes = excluded.writes;
