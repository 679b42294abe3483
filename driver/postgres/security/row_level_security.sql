-- Row-level security keyed on the catalog (docs/security.md): a role named
-- in app_roles (directly, or through a group role it is a member of) reads
-- the rows of the apps it is mapped to, and writes only those of the apps
-- it is mapped to with writes. A row's app is the catalog's owner of its
-- type (outbox, route_state, route_pause, the delivered counts,
-- resolutions) or of its
-- consumer (inbox, inbox_queue, offsets). The catalog is read by all; a
-- role registers and adopts entries for its own apps only, never the
-- migrations entry, and deletes none. The election's rows are read by all
-- and written by their app's roles only.
--
-- Opt-in: run by the schema's owner (the role that migrated) after the
-- migrations, and again after each upgrade (every statement may run
-- twice). The owner and superusers are not confined (the tables are not
-- FORCEd): they migrate, and run the operators' commands that act on
-- every app (owners transfer, dead retry --all-apps, doubt resolve).
-- Every other role that touches these tables must be in app_roles first:
-- an unmapped role sees no row and writes none. To undo, DISABLE ROW LEVEL
-- SECURITY on the same tables.
--
-- What it costs: a confined role's statement finds its apps and their
-- types once, as an array (each policy calls the functions below in a
-- scalar subquery, which PostgreSQL runs once per statement, as an
-- InitPlan), then tests each row it touches against that array. Not a
-- subquery over the catalog in the policy itself: the planner prices such
-- a subplan into every rescan of the table, and chose a sequential scan
-- of the whole outbox for the claim's UPDATE over its primary-key lookups
-- (docs/benchmarks.md, "Row-level security", has both). A consumer no
-- app owns in the catalog (an Inbox no Client registers, a sink's consumer) stays open to every role granted the
-- table, as it is without these policies.
-- {{schema}} is replaced by the configured schema name.

-- The apps the current role acts for (only those it writes, when writes):
-- its own rows of app_roles and those of every role it is a member of. A
-- role dropped since it was mapped matches nothing (to_regrole is NULL).
-- The functions run with the caller's rights (every role reads owners and
-- app_roles), in PL/pgSQL: PostgreSQL tries to inline a SQL function at
-- every planning, parsing its text again, and runs one that it cannot
-- inline with a fresh plan at every call, where a PL/pgSQL function is
-- compiled, and its query planned, once per session (the claim is planned
-- at every call, migration 9 says why not SQL either). Every name is
-- qualified, so a caller's search_path resolves none of them.
CREATE OR REPLACE FUNCTION {{schema}}.role_apps(writes boolean) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT coalesce(pg_catalog.array_agg(a.app), '{}') FROM {{schema}}.app_roles a
            WHERE (a.writes OR NOT role_apps.writes)
              AND pg_catalog.pg_has_role(pg_catalog.to_regrole(a.role), 'MEMBER'));
END
$$;

-- The names of the kind ('type' or 'consumer') that the current role's
-- apps own (of those it writes, when writes).
CREATE OR REPLACE FUNCTION {{schema}}.role_owned(kind text, writes boolean) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT coalesce(pg_catalog.array_agg(o.name), '{}')
            FROM {{schema}}.owners o JOIN {{schema}}.app_roles a ON a.app = o.app
            WHERE o.kind = role_owned.kind AND (a.writes OR NOT role_owned.writes)
              AND pg_catalog.pg_has_role(pg_catalog.to_regrole(a.role), 'MEMBER'));
END
$$;

-- Whether the current role reads every app's rows (an app_roles row of
-- app '*', which a console has); '*' never grants a write.
CREATE OR REPLACE FUNCTION {{schema}}.role_reads_all() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN '*' = ANY ({{schema}}.role_apps(false));
END
$$;

-- The consumers some app owns: the others are open to every role.
CREATE OR REPLACE FUNCTION {{schema}}.owned_consumers() RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT coalesce(pg_catalog.array_agg(o.name), '{}') FROM {{schema}}.owners o
            WHERE o.kind = 'consumer' AND o.app IS NOT NULL);
END
$$;

-- The rows of a type are its owner app's.
DROP POLICY IF EXISTS app_reads ON {{schema}}.outbox;
CREATE POLICY app_reads ON {{schema}}.outbox FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR type = ANY ((SELECT {{schema}}.role_owned('type', false))::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.outbox;
CREATE POLICY app_writes ON {{schema}}.outbox FOR ALL
    USING (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]))
    WITH CHECK (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]));
ALTER TABLE {{schema}}.outbox ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS app_reads ON {{schema}}.route_state;
CREATE POLICY app_reads ON {{schema}}.route_state FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR type = ANY ((SELECT {{schema}}.role_owned('type', false))::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.route_state;
CREATE POLICY app_writes ON {{schema}}.route_state FOR ALL
    USING (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]))
    WITH CHECK (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]));
ALTER TABLE {{schema}}.route_state ENABLE ROW LEVEL SECURITY;

-- An operator's pause of a type (version 14) is its owner's to set and
-- lift, and read by every role that reads the type's route.
DROP POLICY IF EXISTS app_reads ON {{schema}}.route_pause;
CREATE POLICY app_reads ON {{schema}}.route_pause FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR type = ANY ((SELECT {{schema}}.role_owned('type', false))::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.route_pause;
CREATE POLICY app_writes ON {{schema}}.route_pause FOR ALL
    USING (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]))
    WITH CHECK (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]));
ALTER TABLE {{schema}}.route_pause ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS app_reads ON {{schema}}.delivered_counts;
CREATE POLICY app_reads ON {{schema}}.delivered_counts FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR type = ANY ((SELECT {{schema}}.role_owned('type', false))::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.delivered_counts;
CREATE POLICY app_writes ON {{schema}}.delivered_counts FOR ALL
    USING (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]))
    WITH CHECK (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]));
ALTER TABLE {{schema}}.delivered_counts ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS app_reads ON {{schema}}.delivered_counts_log;
CREATE POLICY app_reads ON {{schema}}.delivered_counts_log FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR type = ANY ((SELECT {{schema}}.role_owned('type', false))::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.delivered_counts_log;
CREATE POLICY app_writes ON {{schema}}.delivered_counts_log FOR ALL
    USING (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]))
    WITH CHECK (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]));
ALTER TABLE {{schema}}.delivered_counts_log ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS app_reads ON {{schema}}.resolutions;
CREATE POLICY app_reads ON {{schema}}.resolutions FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR type = ANY ((SELECT {{schema}}.role_owned('type', false))::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.resolutions;
CREATE POLICY app_writes ON {{schema}}.resolutions FOR ALL
    USING (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]))
    WITH CHECK (type = ANY ((SELECT {{schema}}.role_owned('type', true))::text[]));
ALTER TABLE {{schema}}.resolutions ENABLE ROW LEVEL SECURITY;

-- The rows of a consumer are its owner app's, or anyone's while no app
-- owns it.
DROP POLICY IF EXISTS app_reads ON {{schema}}.inbox;
CREATE POLICY app_reads ON {{schema}}.inbox FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR consumer = ANY ((SELECT {{schema}}.role_owned('consumer', false))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.inbox;
CREATE POLICY app_writes ON {{schema}}.inbox FOR ALL
    USING (consumer = ANY ((SELECT {{schema}}.role_owned('consumer', true))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]))
    WITH CHECK (consumer = ANY ((SELECT {{schema}}.role_owned('consumer', true))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]));
ALTER TABLE {{schema}}.inbox ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS app_reads ON {{schema}}.inbox_queue;
CREATE POLICY app_reads ON {{schema}}.inbox_queue FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR consumer = ANY ((SELECT {{schema}}.role_owned('consumer', false))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.inbox_queue;
CREATE POLICY app_writes ON {{schema}}.inbox_queue FOR ALL
    USING (consumer = ANY ((SELECT {{schema}}.role_owned('consumer', true))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]))
    WITH CHECK (consumer = ANY ((SELECT {{schema}}.role_owned('consumer', true))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]));
ALTER TABLE {{schema}}.inbox_queue ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS app_reads ON {{schema}}.offsets;
CREATE POLICY app_reads ON {{schema}}.offsets FOR SELECT
    USING ((SELECT {{schema}}.role_reads_all()) OR consumer = ANY ((SELECT {{schema}}.role_owned('consumer', false))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]));
DROP POLICY IF EXISTS app_writes ON {{schema}}.offsets;
CREATE POLICY app_writes ON {{schema}}.offsets FOR ALL
    USING (consumer = ANY ((SELECT {{schema}}.role_owned('consumer', true))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]))
    WITH CHECK (consumer = ANY ((SELECT {{schema}}.role_owned('consumer', true))::text[])
        OR NOT consumer = ANY ((SELECT {{schema}}.owned_consumers())::text[]));
ALTER TABLE {{schema}}.offsets ENABLE ROW LEVEL SECURITY;

-- The catalog: read by all; an entry is inserted for, and adopted (from
-- no app, or from its own) by, an app the role writes; the migrations
-- entry is the migrator's. No DELETE policy: releasing an entry, or
-- transferring it away, is an operator's act.
DROP POLICY IF EXISTS catalog_reads ON {{schema}}.owners;
CREATE POLICY catalog_reads ON {{schema}}.owners FOR SELECT USING (true);
DROP POLICY IF EXISTS catalog_registers ON {{schema}}.owners;
CREATE POLICY catalog_registers ON {{schema}}.owners FOR INSERT
    WITH CHECK (kind <> 'migrations' AND app = ANY ((SELECT {{schema}}.role_apps(true))::text[]));
DROP POLICY IF EXISTS catalog_adopts ON {{schema}}.owners;
CREATE POLICY catalog_adopts ON {{schema}}.owners FOR UPDATE
    USING (kind <> 'migrations' AND (app IS NULL OR app = ANY ((SELECT {{schema}}.role_apps(true))::text[])))
    WITH CHECK (kind <> 'migrations' AND app = ANY ((SELECT {{schema}}.role_apps(true))::text[]));
ALTER TABLE {{schema}}.owners ENABLE ROW LEVEL SECURITY;

-- The election's epochs: read by all (status, the console, every claim's
-- fence), written for the role's own apps only, so that no other app's
-- role can move an epoch and fence a healthy leader out.
DROP POLICY IF EXISTS election_reads ON {{schema}}.leader;
CREATE POLICY election_reads ON {{schema}}.leader FOR SELECT USING (true);
DROP POLICY IF EXISTS election_writes ON {{schema}}.leader;
CREATE POLICY election_writes ON {{schema}}.leader FOR ALL
    USING (app = ANY ((SELECT {{schema}}.role_apps(true))::text[]))
    WITH CHECK (app = ANY ((SELECT {{schema}}.role_apps(true))::text[]));
ALTER TABLE {{schema}}.leader ENABLE ROW LEVEL SECURITY;
