-- The least privileges of a relay (`mensageria relay`, or a Go app's
-- Client.Start) of app {{app}}, granted to role {{role}}
-- (docs/security.md). {{schema}} is the schema.
--
-- What it does with them: checks the schema version (migrate check, never
-- up), registers its own types, consumers and Kafka transactional ids in
-- the catalog, holds its app's election, claims, marks and settles its
-- types' rows, purges its delivered rows, counts and consumers' dedup
-- records, records its routes' states and reads operators' pauses of
-- them. Enqueueing is the producer's
-- grant (producer.sql): a Go app that enqueues and relays is granted both.
-- Without row-level security every grant below reaches every app's rows of
-- the table; with it, only {{app}}'s.
GRANT USAGE ON SCHEMA {{schema}} TO {{role}};
GRANT SELECT ON {{schema}}.schema_migrations, {{schema}}.outbox_identity TO {{role}};
-- Registration inserts its entries and adopts the unclaimed ones; SELECT
-- ... FOR UPDATE of its entries needs UPDATE. No DELETE: releasing or
-- transferring an entry is an operator's act (mensageria owners).
GRANT SELECT, INSERT, UPDATE ON {{schema}}.owners TO {{role}};
-- The election's epoch row of its app.
GRANT SELECT, INSERT, UPDATE ON {{schema}}.leader TO {{role}};
-- Claim, mark and settle are UPDATEs; a delivered row is DELETEd at
-- settle (or kept, and purged later).
GRANT SELECT, UPDATE, DELETE ON {{schema}}.outbox TO {{role}};
GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.route_state TO {{role}};
-- Operators' pauses of its types, read on every ownership watch.
GRANT SELECT ON {{schema}}.route_pause TO {{role}};
GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.delivered_counts TO {{role}};
GRANT SELECT, INSERT, DELETE ON {{schema}}.delivered_counts_log TO {{role}};
-- The purge of its consumers' dedup records and applied queue rows (the
-- purge locks the rows it deletes, which needs UPDATE).
GRANT SELECT, DELETE ON {{schema}}.inbox TO {{role}};
GRANT SELECT, UPDATE, DELETE ON {{schema}}.inbox_queue TO {{role}};
INSERT INTO {{schema}}.app_roles (role, app, writes) VALUES ('{{role}}', '{{app}}', true)
ON CONFLICT (role, app) DO UPDATE SET writes = true;
