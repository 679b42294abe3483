-- The least privileges of an app of {{app}} that applies its inbox queue
-- by SQL (docs/config.md, "The inbox queue SQL protocol"), granted to role
-- {{role}} (docs/security.md). {{schema}} is the schema.
--
-- inbox_claim, inbox_applied, inbox_failed and inbox_dead run with the
-- caller's rights: they read and update inbox_queue. DELETE is not
-- granted: dead rows are revived or purged by the app's daemons; grant it
-- if the app deletes its dead rows itself. SELECT on owners lets the
-- row-level security policies find the app's consumers.
GRANT USAGE ON SCHEMA {{schema}} TO {{role}};
GRANT SELECT, UPDATE ON {{schema}}.inbox_queue TO {{role}};
GRANT SELECT ON {{schema}}.owners TO {{role}};
INSERT INTO {{schema}}.app_roles (role, app, writes) VALUES ('{{role}}', '{{app}}', true)
ON CONFLICT (role, app) DO UPDATE SET writes = true;
