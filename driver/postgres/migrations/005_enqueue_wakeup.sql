-- mensageria schema, version 5: a plain SQL INSERT into the outbox wakes the
-- relay, as the Go client's enqueues do.
-- {{schema}} is replaced by the configured schema name.
--
-- The relay LISTENs on the channel "<schema>_outbox" and otherwise polls
-- (every second by default). The Go client sends a debounced pg_notify with
-- its enqueues; an app enqueueing by plain SQL (JDBC, node-pg, psql) sent
-- none, so its messages waited for the poll: 0.5 to 1 s from commit to
-- delivery where a Go enqueue takes milliseconds. Now the table notifies
-- for every client, on the channel it always was, so relays of every
-- version wake up on it.
--
-- Why not one pg_notify per INSERT statement: at commit, a transaction that
-- notified takes a lock shared by the whole server and holds it until its
-- commit record is flushed, so notifying commits cannot share a WAL flush;
-- eight connections doing one-row INSERTs ran at a third of their rate
-- (docs/benchmarks.md, enqueue wake-up). Nor a PL/pgSQL call in every
-- enqueueing transaction, deferred to its commit: that cost the same eight
-- connections a fifth of their rate in CPU alone (the same page,
-- docs/adr/0013-sql-enqueue-wakeup.md). So the trigger's WHEN, built-in
-- functions only, decides once per transaction, at its first row, and lets
-- the trigger fire only when a wake-up is due: when no transaction chose
-- to notify in the last 10 ms. Then the trigger records the time and
-- notifies, and the notification goes out when the transaction commits
-- (and never, if it rolls back).
--
-- A transaction the debounce spares is picked up by the relay's claims
-- after the notification before it (it keeps claiming while it finds
-- rows), by the next notification, or at worst by the poll: that is the
-- case of a transaction that enqueues within 10 ms of another's choice
-- and commits after the relay stopped finding rows, and of the ones after
-- a transaction that chose to notify and then rolled back. The Go client's
-- own debounce has always left the same cases to the poll.

-- The time, in milliseconds since the epoch, at which a transaction last
-- chose to notify. Its value only ever steers the debounce: losing it (a
-- restore) costs one extra notification. Every role may read and set it:
-- the trigger runs with the rights of whoever inserts (a producer granted
-- only INSERT on outbox, as version 1 asked, must keep enqueueing), and
-- the most a role with access to the schema can do with it is make the
-- wake-ups more or less frequent, never lose a message: the poll is still
-- there. A sequence, because it is shared by every session without a lock
-- that lasts until commit: a row would queue the enqueuers on its lock.
CREATE SEQUENCE {{schema}}.outbox_wakeup_at MINVALUE 0 START 0;
GRANT SELECT, UPDATE ON SEQUENCE {{schema}}.outbox_wakeup_at TO PUBLIC;

-- Runs only when the WHEN below found a wake-up due: at most about a
-- hundred times a second however fast rows come. Every name is qualified,
-- so a caller's search_path resolves none of them.
CREATE FUNCTION {{schema}}.outbox_wakeup() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.setval('{{schema}}.outbox_wakeup_at'::regclass,
                              (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint);
    -- The channel is the schema's name as the table sees it, which is the
    -- name the relay's driver is configured with.
    PERFORM pg_catalog.pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
    RETURN NULL;
END
$$;

-- The WHEN runs for every row inserted. The first row of a transaction
-- sets a transaction-local flag (set_config returns the value it sets), so
-- every later row stops at the first test: one GUC lookup a row. That first
-- row goes on to the debounce: due when the last choice to notify is 10 ms
-- old or more, or in the future (a clock stepped back must not silence the
-- wake-ups until it catches up). The flag is undone with a savepoint rolled
-- back, together with the notification the savepoint queued, so the
-- transaction's next row decides again. Not deferred to the commit: a
-- deferred event costs every enqueueing transaction a trigger call.
CREATE TRIGGER outbox_wakeup AFTER INSERT ON {{schema}}.outbox
    FOR EACH ROW
    WHEN (pg_catalog.current_setting('mensageria.wakeup_{{schema}}', true) IS DISTINCT FROM 'decided'
          AND pg_catalog.set_config('mensageria.wakeup_{{schema}}', 'decided', true) = 'decided'
          AND ((extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint
               - coalesce(pg_catalog.pg_sequence_last_value('{{schema}}.outbox_wakeup_at'::regclass), 0))
              NOT BETWEEN 0 AND 9)
    EXECUTE FUNCTION {{schema}}.outbox_wakeup();
