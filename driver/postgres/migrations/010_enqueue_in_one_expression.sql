-- mensageria schema, version 10: the enqueue trigger's common case in one
-- PL/pgSQL expression (docs/adr/0021-enqueue-in-one-expression.md).
-- {{schema}} is replaced by the configured schema name.
--
-- PL/pgSQL prepares each expression of a function once per session, but
-- builds its executable state again in every transaction, so a function
-- costs per transaction about what its expressions are, one by one. Version
-- 7's ran eight for a one-row transaction (four rules, the wake-up's flag,
-- read and set, its due test, the type's flag). Now the row that passes
-- everything, what nearly every enqueue is, costs one; the tests one by
-- one, with their SQLSTATEs and messages (MS001-MS004), run only for a row
-- the expression does not pass. Counted with callgrind for a one-row
-- autocommitted INSERT (scripts/callgrind-insert.sh): 567,000 instructions
-- with version 9's trigger, 550,000 with this one (531,000 without the
-- empty-type test below); an EXECUTE of a prepared one 431,000 and 414,000.
--
-- The wake-up is decided at each call rather than once per transaction: a
-- transaction of several types decides at each type's first row, which
-- costs one sequence read and notifies at most once per 10 ms as before
-- (and PostgreSQL sends a channel's notifications of one transaction as
-- one). The per-transaction flag goes.
--
-- The WHEN now also sends an empty type to the function. Versions 7 to 9
-- let one through once the session had enqueued before: a transaction's
-- flag, undone at its end, reads as '' afterwards (the setting then exists
-- in the session with an empty value), which equals an empty type.
--
-- The trigger is dropped and created again in this migration's
-- transaction, so that one migration holds all of the enqueue trigger (the
-- benchmarks cut their "without" variants from it).
DROP TRIGGER outbox_enqueue ON {{schema}}.outbox;

-- With the inserting role's rights and no SET clause (a SET costs every
-- call a save and restore of the setting): every name is qualified, so a
-- caller's search_path resolves none of them. The blocks between the
-- "rules" and "wake-up" markers are what the enqueue-check and wake-up
-- benchmarks take out to measure each one's cost (internal/bench).
CREATE OR REPLACE FUNCTION {{schema}}.outbox_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    header record;
BEGIN
    -- The common case in one expression, so that PL/pgSQL builds one
    -- expression per transaction instead of one per test: this row's type
    -- recorded as passed (undone if a rule below refuses the row, with the
    -- statement), every rule holding, the type's owner remembered at the
    -- catalog's generation, and a wake-up already chosen in the last 10 ms.
    -- Anything else, or a NULL, goes on to the tests one by one.
    IF pg_catalog.set_config('mensageria.enqueue_{{schema}}', NEW.type, true) IS NOT NULL
       -- rules begin
       AND NEW.type <> '' AND pg_catalog.octet_length(NEW.type) <= 200
       AND NEW.key <> '' AND pg_catalog.octet_length(NEW.key) <= 1000
       AND NEW.headers::text !~ '^\s*[^\s{]|:\s*[^\s"]|""'
       AND pg_catalog.current_setting('mensageria.owned_{{schema}}_' || pg_catalog.md5(NEW.type), true)
           = coalesce(pg_catalog.pg_sequence_last_value('{{schema}}.owners_changed'::regclass), 0)::text
       -- rules end
       -- wake-up begin
       AND (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint
           - coalesce(pg_catalog.pg_sequence_last_value('{{schema}}.outbox_wakeup_at'::regclass), 0) BETWEEN 0 AND 9
       -- wake-up end
    THEN
        RETURN NEW;
    END IF;
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
    -- Version 5's debounce: due when no transaction chose to notify in the
    -- last 10 ms, or the last choice is in the future (a clock stepped back
    -- must not silence the wake-ups until it catches up). The choice is
    -- recorded in a sequence, shared by every session without a lock
    -- (docs/adr/0013). The notification goes out at commit, or never if
    -- the transaction rolls back.
    IF (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint
       - coalesce(pg_catalog.pg_sequence_last_value('{{schema}}.outbox_wakeup_at'::regclass), 0) NOT BETWEEN 0 AND 9 THEN
        PERFORM pg_catalog.setval('{{schema}}.outbox_wakeup_at'::regclass,
                                  (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint);
        -- The channel is the schema's name as the table sees it, which
        -- is the name the relay's driver is configured with.
        PERFORM pg_catalog.pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
    END IF;
    -- wake-up end
    RETURN NEW;
END
$$;

-- The WHEN, for every row, in order of cost: the type this transaction
-- already passed (one setting read; set by the function, undone with a
-- savepoint rolled back), an empty type, the key's bounds, and headers that could hold
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
          OR NEW.type = ''
          OR NEW.key = '' OR pg_catalog.octet_length(NEW.key) > 1000
          OR NEW.headers::text ~ '^\s*[^\s{]|:\s*[^\s"]|""'
          -- rules end
         )
    EXECUTE FUNCTION {{schema}}.outbox_enqueue();
