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
-- The owner lookup is remembered by the session, for as long as no type
-- loses its owner: a connection that enqueues the same types all day reads
-- owners once. The catalog's generation is a sequence that every removal
-- moves on, under an advisory lock that makes a remembered answer never
-- older than the last removal that committed (outbox_owned below says how).
-- The session setting that holds the answer
-- can be set by the session itself: a role that deliberately forges it
-- enqueues a type nobody relays, which the check exists to catch as a
-- mistake, not to forbid (who may enqueue at all is what GRANT decides).

-- The catalog's generation: moved on by every change that may leave a type
-- without an owner (a DELETE, a TRUNCATE, an UPDATE of the key); read by
-- every enqueueing role (no lock, no wait), as the wake-up time is. A
-- transfer or a registration changes only who owns a type, which the
-- enqueue check does not ask, and moves nothing.
-- It starts at 1 and a generation never read counts as 0, so the first
-- change is a new generation too (a fresh sequence's first nextval returns
-- its start, which pg_sequence_last_value reported as NULL until then).
CREATE SEQUENCE {{schema}}.owners_changed MINVALUE 1 START 1;
GRANT SELECT ON SEQUENCE {{schema}}.owners_changed TO PUBLIC;

-- The change takes the catalog's advisory lock exclusively, then moves the
-- generation, after its row is changed (AFTER); a row trigger, so that a
-- statement that removes nothing (the transfer's DELETE of a release that
-- is not one) takes nothing.
CREATE FUNCTION {{schema}}.owners_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('{{schema}}.owners', 0));
    PERFORM pg_catalog.nextval('{{schema}}.owners_changed'::regclass);
    RETURN NULL;
END
$$;

CREATE TRIGGER owners_changed AFTER DELETE OR UPDATE OF kind, name ON {{schema}}.owners
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.owners_changed();
CREATE TRIGGER owners_truncated AFTER TRUNCATE ON {{schema}}.owners
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.owners_changed();

-- Whether a type has an owner, remembered by the session at the catalog's
-- generation. With the rights of the role that migrated (SECURITY
-- DEFINER): a producer granted only INSERT on outbox, as version 1 asked,
-- needs no grant on owners. It takes no row lock, so a transfer never waits
-- for an open enqueue. What it remembers cannot be outdated by a removal
-- about to commit, because it remembers only when it holds the catalog's
-- advisory lock shared, taken before the generation is read and the type
-- looked up: a removal takes it exclusively before moving the generation,
-- so either the removal is in progress (the lock is refused: the answer is
-- used once, not remembered), or it waits for this transaction (and then
-- moves the generation past what was remembered), or it committed before
-- the lookup (which then finds no owner). Only READ COMMITTED remembers: an
-- older snapshot may still see a row whose removal committed.
CREATE FUNCTION {{schema}}.outbox_owned(message_type text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    remember boolean := current_setting('transaction_isolation') = 'read committed'
        AND pg_try_advisory_xact_lock_shared(hashtextextended('{{schema}}.owners', 0));
    generation bigint := coalesce(pg_sequence_last_value('{{schema}}.owners_changed'::regclass), 0);
BEGIN
    PERFORM FROM {{schema}}.owners o WHERE o.kind = 'type' AND o.name = message_type;
    IF NOT FOUND THEN
        -- The type is quoted as a JSON string, which the Go driver reads
        -- back.
        RAISE EXCEPTION 'mensageria: message type % has no owner app in schema %: the app that sends it records it when its relay starts (or run ''mensageria owners register --config …''); nothing was enqueued',
                to_json(message_type)::text, '{{schema}}'
            USING ERRCODE = 'MS001', SCHEMA = '{{schema}}', TABLE = 'outbox', COLUMN = 'type';
    END IF;
    IF remember THEN
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
