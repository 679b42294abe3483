-- mensageria schema, version 5: a plain SQL INSERT into the outbox wakes the
-- relay, as the Go client's enqueues do.
-- {{schema}} is replaced by the configured schema name.
--
-- The relay LISTENs on the channel "<schema>_outbox" and otherwise polls
-- (every second by default). The Go client sends a debounced pg_notify with
-- its enqueues; an app enqueueing by plain SQL (JDBC, node-pg, psql) sent
-- none, so its messages waited for the poll: 0.6 to 1 s from commit to
-- delivery where a Go enqueue takes milliseconds. Now the table notifies
-- for every client, and the channel stays what it was, so relays of every
-- version wake up on it.
--
-- Why not simply one pg_notify per INSERT statement: at commit, a
-- transaction that notified takes a database-wide lock and holds it until
-- its commit record is flushed, so notifying commits cannot share a WAL
-- flush. Eight connections doing one-row INSERTs ran at about a fifth of
-- their rate that way (docs/benchmarks.md, enqueue wake-up;
-- docs/adr/0009-sql-enqueue-wakeup.md). So the notification is
--   * once per transaction: the trigger's WHEN sets a transaction-local
--     flag on the first row and is false for every later row, so a
--     100-row INSERT, or ten INSERTs in one transaction, queue one event;
--   * decided at commit (a deferred constraint trigger), not at the INSERT:
--     a transaction that enqueues early and commits late does not make
--     the ones committing meanwhile skip their wake-up;
--   * debounced across transactions: at most one transaction in any 10 ms
--     notifies. The last notification's time is kept in a sequence,
--     because a sequence is shared by every session without a lock that
--     lasts to commit (a row would serialize the enqueuers on its lock).
-- A commit that the debounce spares is picked up by the relay's claims
-- after the notification before it (it keeps claiming while it finds rows),
-- by the next notification, or at worst by the poll. A transaction that
-- notified and then failed to commit sends nothing; the next one in 10 ms
-- may have skipped: the poll covers both, as it does for the Go client.

-- The time, in milliseconds since the epoch, at which a commit last chose
-- to notify. Its value only ever steers the debounce: losing it (a
-- restore) costs one extra notification.
CREATE SEQUENCE {{schema}}.outbox_wakeup_at MINVALUE 0 START 0;

-- SECURITY DEFINER: a producer granted only INSERT on outbox (as version 1
-- asked) has no rights on the sequence, and must keep enqueueing. The fixed
-- search_path keeps a caller's own from resolving what this calls.
CREATE FUNCTION {{schema}}.outbox_wakeup() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    last_ms bigint;
BEGIN
    SELECT last_value INTO last_ms FROM {{schema}}.outbox_wakeup_at;
    -- A clock stepped back must not silence the wake-ups until it catches
    -- up, hence the second test.
    IF now_ms - last_ms >= 10 OR now_ms < last_ms THEN
        PERFORM setval('{{schema}}.outbox_wakeup_at', now_ms);
        -- The channel is the schema's name as the table sees it, which is
        -- the name the relay's driver is configured with.
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN runs for every row inserted, at the INSERT, and only the first
-- row of a transaction passes it (set_config returns the value it sets).
-- The flag is transaction-local, and undone with a savepoint rolled back,
-- together with the event it queued. Built-in functions only: no PL/pgSQL
-- call per row.
CREATE CONSTRAINT TRIGGER outbox_wakeup AFTER INSERT ON {{schema}}.outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (current_setting('mensageria.wakeup_{{schema}}', true) IS DISTINCT FROM 'queued'
          AND set_config('mensageria.wakeup_{{schema}}', 'queued', true) = 'queued')
    EXECUTE FUNCTION {{schema}}.outbox_wakeup();
