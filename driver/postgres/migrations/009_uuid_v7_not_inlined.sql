-- mensageria schema, version 9: the outbox's message-id default in PL/pgSQL,
-- so that planning an INSERT no longer parses it.
-- {{schema}} is replaced by the configured schema name.
--
-- Version 1 wrote uuid_v7() in SQL. PostgreSQL inlines a one-SELECT SQL
-- function where it is called, and it does so while planning: every plain
-- INSERT that leaves message_id to its default (what a Java, psql or
-- Python enqueue does) had the planner parse and analyse the function's
-- text again. Counted with callgrind on a single-user backend, that was a
-- quarter of all the work of a one-row autocommitted INSERT: 667,000
-- instructions with the SQL function, 493,000 with this one; a 100-row
-- INSERT plans once and calls the function 100 times, 8.73 against 8.86
-- million (docs/adr/0020-enqueue-cost-in-the-backend.md). A PL/pgSQL
-- function is never inlined: it is compiled once per session, and a call
-- costs an expression evaluation.
--
-- The same value as before: a random UUID whose first 48 bits are the Unix
-- time in milliseconds, with version 7 and the RFC 4122 variant. The
-- column's default names the function by its OID, so replacing its body
-- changes no default and rewrites nothing. overlay(… placing …) and
-- substring(… FROM …) are grammar, which names pg_catalog's functions
-- itself; every other name is qualified, so no caller's search_path
-- resolves one.
CREATE OR REPLACE FUNCTION {{schema}}.uuid_v7() RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN pg_catalog.encode(
        pg_catalog.set_bit(pg_catalog.set_bit(
            overlay(pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
                placing substring(pg_catalog.int8send((extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid;
END
$$;
