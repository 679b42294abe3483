-- mensageria schema, version 7: the enqueue rules and the wake-up in one
-- row trigger that costs a few microseconds a transaction.
-- {{schema}} is replaced by the configured schema name.
--
-- Version 2 checked every INSERT with a statement trigger over a transition
-- table, and version 5 woke the relay with a row trigger whose WHEN clause
-- held the whole debounce. Both cost more than they look: PostgreSQL builds
-- a statement's transition table and runs its trigger's query anew for
-- every statement, and it reads a trigger's WHEN clause back from its
-- stored form for every statement too, at a cost that grows with the
-- clause's size (migration 5's was 6 KB). Measured in the backend's CPU for
-- a one-row autocommitted INSERT: 26 µs with no trigger, 41 µs with the
-- wake-up, 64 µs with both; per 100-row INSERT 725, 760 and 875 µs
-- (docs/benchmarks.md, "the enqueue check"; docs/adr/0018-enqueue-trigger.md).
--
-- Now one BEFORE row trigger with a short WHEN does both. The WHEN lets a
-- row through to the function only when something about it is not already
-- known to be fine: the first row of each type in a transaction, a key out
-- of bounds, or headers that are not plainly a flat object of strings. The
-- function then applies the rules of version 2 with the same SQLSTATEs and
-- messages (MS001-MS004), and, once per transaction, the wake-up of
-- version 5. A transaction of 100 rows of one type runs the function once;
-- every other row costs the WHEN alone.
--
-- The owner lookup is remembered by the session, for as long as the
-- catalog does not change: a connection that enqueues the same types all
-- day reads owners once. The catalog's generation is a sequence that every
-- statement removing or changing an owners row moves on, after its rows
-- are written and locked, so a remembered answer is never older than the
-- last change that committed. The session setting that holds the answer
-- can be set by the session itself: a role that deliberately forges it
-- enqueues a type nobody relays, which the check exists to catch as a
-- mistake, not to forbid (who may enqueue at all is what GRANT decides).

-- The catalog's generation: moved on by every DELETE, UPDATE or TRUNCATE of
-- owners; read by every enqueueing role (no lock, no wait), as the wake-up
-- time is.
CREATE SEQUENCE {{schema}}.owners_changed MINVALUE 0 START 0;
GRANT SELECT ON SEQUENCE {{schema}}.owners_changed TO PUBLIC;

CREATE FUNCTION {{schema}}.owners_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.nextval('{{schema}}.owners_changed'::regclass);
    RETURN NULL;
END
$$;

-- AFTER, so the generation moves once the statement's rows are changed and
-- locked: a session that reads the new generation and then looks a type up
-- waits for this transaction, and sees what it committed.
CREATE TRIGGER owners_changed AFTER DELETE OR UPDATE OR TRUNCATE ON {{schema}}.owners
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.owners_changed();

-- Whether a type has an owner, remembered by the session at the catalog's
-- generation read before the lookup. With the rights of the role that
-- migrated (SECURITY DEFINER): a producer granted only INSERT on outbox, as
-- version 1 asked, needs no grant on owners. It takes no lock (an operator's
-- transfer never waits for an open enqueue). Instead it remembers only an
-- owners row that no transaction has touched since it was written (xmax 0):
-- a transaction removing the type sets xmax before it moves the generation
-- and before it commits, so an answer that may be about to become wrong is
-- used once and never remembered.
CREATE FUNCTION {{schema}}.outbox_owned(message_type text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    generation bigint := coalesce(pg_sequence_last_value('{{schema}}.owners_changed'::regclass), 0);
    touched xid;
BEGIN
    SELECT o.xmax INTO touched FROM {{schema}}.owners o WHERE o.kind = 'type' AND o.name = message_type;
    IF NOT FOUND THEN
        -- The type is quoted as a JSON string, which the Go driver reads
        -- back.
        RAISE EXCEPTION 'mensageria: message type % has no owner app in schema %: the app that sends it records it when its relay starts (or run ''mensageria owners register --config …''); nothing was enqueued',
                to_json(message_type)::text, '{{schema}}'
            USING ERRCODE = 'MS001', SCHEMA = '{{schema}}', TABLE = 'outbox', COLUMN = 'type';
    END IF;
    IF touched = '0'::xid THEN
        PERFORM set_config('mensageria.owned_{{schema}}_' || md5(message_type), generation::text, false);
    END IF;
END
$$;

-- With the inserting role's rights and no SET clause (a SET costs every
-- call a save and restore of the setting): every name is qualified, so a
-- caller's search_path resolves none of them. The blocks between the
-- "rules" and "wake-up" markers are what the enqueue-check and wake-up
-- benchmarks take out to measure each one's cost (internal/bench).
CREATE FUNCTION {{schema}}.outbox_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    header record;
BEGIN
    -- rules begin
    -- The shape first, so that an overlong type is told it is too long
    -- rather than that no app owns it.
    IF NEW.type = '' OR pg_catalog.octet_length(NEW.type) > 200 THEN
        RAISE EXCEPTION 'mensageria: message type must be 1 to 200 bytes, got %: name it like "order.created"; nothing was enqueued',
                pg_catalog.octet_length(NEW.type) || ' bytes'
            USING ERRCODE = 'MS003', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'type';
    END IF;
    IF NEW.key = '' OR pg_catalog.octet_length(NEW.key) > 1000 THEN
        RAISE EXCEPTION 'mensageria: message key must be 1 to 1000 bytes, got %: the key names the business entity (an order id; hash a longer one); nothing was enqueued',
                pg_catalog.octet_length(NEW.key) || ' bytes'
            USING ERRCODE = 'MS002', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'key';
    END IF;
    -- The WHEN's test of the headers, again: a row that came for its type
    -- alone skips the lookup of every header.
    IF NEW.headers::text ~ '^\s*[^\s{]|:\s*[^\s"]|""' THEN
        IF pg_catalog.json_typeof(NEW.headers) <> 'object' THEN
            RAISE EXCEPTION 'mensageria: headers must be a JSON object of string values, got a JSON %: write {"name": "value"}; nothing was enqueued',
                    pg_catalog.json_typeof(NEW.headers)
                USING ERRCODE = 'MS004', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'headers';
        END IF;
        SELECT h.key, pg_catalog.json_typeof(h.value) AS typ INTO header
        FROM pg_catalog.json_each(NEW.headers) h
        WHERE h.key = '' OR pg_catalog.json_typeof(h.value) <> 'string'
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'mensageria: header % must be a non-empty name with a JSON string value, got a JSON %: quote the value ({"n": "1"}); nothing was enqueued',
                    pg_catalog.to_json(header.key)::text, header.typ
                USING ERRCODE = 'MS004', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'headers';
        END IF;
    END IF;
    IF pg_catalog.current_setting('mensageria.owned_{{schema}}_' || pg_catalog.md5(NEW.type), true)
       IS DISTINCT FROM coalesce(pg_catalog.pg_sequence_last_value('{{schema}}.owners_changed'::regclass), 0)::text THEN
        PERFORM {{schema}}.outbox_owned(NEW.type);
    END IF;
    -- rules end
    -- wake-up begin
    -- Version 5's debounce, decided at the transaction's first row: due
    -- when no transaction chose to notify in the last 10 ms, or the last
    -- choice is in the future (a clock stepped back must not silence the
    -- wake-ups until it catches up). The choice is recorded in a sequence,
    -- shared by every session without a lock (docs/adr/0013). The
    -- notification goes out at commit, or never if the transaction rolls
    -- back; a savepoint rolled back undoes the flag with the notification
    -- it queued, so the transaction's next row decides again.
    IF pg_catalog.current_setting('mensageria.wakeup_{{schema}}', true) IS DISTINCT FROM 'decided' THEN
        PERFORM pg_catalog.set_config('mensageria.wakeup_{{schema}}', 'decided', true);
        IF (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint
           - coalesce(pg_catalog.pg_sequence_last_value('{{schema}}.outbox_wakeup_at'::regclass), 0) NOT BETWEEN 0 AND 9 THEN
            PERFORM pg_catalog.setval('{{schema}}.outbox_wakeup_at'::regclass,
                                      (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint);
            -- The channel is the schema's name as the table sees it, which
            -- is the name the relay's driver is configured with.
            PERFORM pg_catalog.pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
        END IF;
    END IF;
    -- wake-up end
    -- The rest of this transaction's rows of this type stop at the WHEN.
    PERFORM pg_catalog.set_config('mensageria.enqueue_{{schema}}', NEW.type, true);
    RETURN NEW;
END
$$;

-- The WHEN, for every row, in order of cost: the type this transaction
-- already passed (one setting read; set by the function, undone with a
-- savepoint rolled back), the key's bounds, and headers that could hold
-- anything but string values. That last test is a cheap sufficient one,
-- not the rule: on JSON the column already validated, no colon followed by
-- anything but a quote means every value is a string, a first character
-- "{" means an object, and no "" means no empty name. Headers it is unsure
-- of (a value with a colon in it, whitespace, an empty value) go to the
-- function, which applies the rule itself.
CREATE TRIGGER outbox_enqueue BEFORE INSERT ON {{schema}}.outbox
    FOR EACH ROW
    WHEN (pg_catalog.current_setting('mensageria.enqueue_{{schema}}', true) IS DISTINCT FROM NEW.type
          -- rules begin
          OR NEW.key = '' OR pg_catalog.octet_length(NEW.key) > 1000
          OR NEW.headers::text ~ '^\s*[^\s{]|:\s*[^\s"]|""'
          -- rules end
         )
    EXECUTE FUNCTION {{schema}}.outbox_enqueue();

DROP TRIGGER outbox_check ON {{schema}}.outbox;
DROP FUNCTION {{schema}}.outbox_check();
DROP TRIGGER outbox_wakeup ON {{schema}}.outbox;
DROP FUNCTION {{schema}}.outbox_wakeup();
