-- mensageria schema, version 2: the ownership catalog, and the database
-- enforcing it on every enqueue, from any client.
-- {{schema}} is replaced by the configured schema name.
--
-- The statements of version 1 keep working on it, so relays and producers
-- of the old build go on running while and after this applies: columns are
-- added nullable, nothing they name is renamed; what goes is two indexes
-- (their one user, the old purge, still runs, by a scan) and two CHECKs the
-- insert check below supersedes. From the first ALTER TABLE on, the outbox
-- is locked until this commits: everything after it is quick, except the
-- index of delivered rows, which takes as long as there are kept ones.
--
-- Refusals of an INSERT into outbox raise these SQLSTATEs (class MS, which
-- the SQL standard leaves to implementations and PostgreSQL does not use),
-- so that a Go, JDBC or psycopg caller can branch on the code and never has
-- to parse the message:
--   MS001  the message type has no entry in owners: no relay would ever
--          deliver it
--   MS002  the key is empty or longer than 1000 bytes
--   MS003  the type is empty or longer than 200 bytes
--   MS004  the headers are not a JSON object of string values (or a header
--          name is empty)
-- Lengths are bytes of UTF-8, as the Go client counts them, not characters.

-- Who owns what. One app owns each message type (only it enqueues and
-- relays it), each inbox consumer (only its relay purges the records, after
-- the consumer's own window), each Kafka transactional id, and the schema's
-- migrations (one row, name 'schema', written by the first app to migrate
-- up). app NULL is a type the upgrade found in use with no owner to name:
-- its enqueues are still accepted and the first app to register it takes it.
CREATE TABLE {{schema}}.owners (
    kind         text        NOT NULL CHECK (kind IN ('type', 'consumer', 'kafka_transactional_id', 'migrations')),
    name         text        NOT NULL CHECK (name <> ''),
    app          text        CHECK (app <> ''),
    dedup_window interval, -- consumers only; NULL keeps their records forever
    since        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
);

-- Made once, never changed: records kept outside this database (a Kafka
-- transactional position) name the outbox they belong to, so that a relay
-- never reconciles its rows against another database's positions.
CREATE TABLE {{schema}}.outbox_identity (
    singleton boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    id        uuid        NOT NULL DEFAULT {{schema}}.uuid_v7(),
    made_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {{schema}}.outbox_identity DEFAULT VALUES;

-- The types in use before the catalog existed stay enqueueable, unclaimed,
-- so that producers of the old build (and plain SQL ones) keep working while
-- their relays are upgraded; their rows wait until the owner registers.
-- This full scan runs before the statements below lock the outbox, so that
-- enqueues and relays are not held up by it.
INSERT INTO {{schema}}.owners (kind, name)
SELECT 'type', type FROM {{schema}}.outbox
UNION
SELECT 'type', type FROM {{schema}}.delivered_counts
ON CONFLICT DO NOTHING;

-- Who answered the last failed attempt (app and destination), for the dead
-- letters; NULL before any failure and on rows of old relays.
ALTER TABLE {{schema}}.outbox ADD COLUMN last_route text;

-- A digest of the payload applied, so that the same key with another payload
-- is told apart from a redelivery. NULL on records stored before it existed
-- (and by old receivers), which then count as plain duplicates.
ALTER TABLE {{schema}}.inbox ADD COLUMN payload_hash bytea;

-- Purge walks one consumer's oldest records, each consumer after its own
-- window. It replaces the index on received_at alone, for the reason given
-- for the outbox below; a relay of the old build still purges, by a scan,
-- and every receive writes one index entry fewer.
CREATE INDEX inbox_consumer_received_idx ON {{schema}}.inbox (consumer, received_at);
DROP INDEX {{schema}}.inbox_received_idx;

-- Purge deletes only its own app's delivered rows: seeking to its types
-- keeps it from stepping over the rows other apps retain longer. It replaces
-- the index on delivered_at alone, which the planner would otherwise walk
-- in time order filtering by type, through every row of an app that keeps
-- its delivered rows longer; a relay of the old build still purges, by a
-- scan. Both indexes cover delivered rows only, which are few unless an app
-- keeps them (KeepDelivered).
CREATE INDEX outbox_delivered_type_idx ON {{schema}}.outbox (type, delivered_at) WHERE state = 'delivered';
DROP INDEX {{schema}}.outbox_delivered_idx;

-- The enqueue rules, for every client: a plain INSERT from Java or psql is
-- held to what the Go client checks, and a type no app owns is refused at
-- once instead of waiting forever for a relay that will never claim it.
--
-- One check per statement, over the rows it inserted: a row trigger in
-- PL/pgSQL costs tens of microseconds a row (an owners lookup each), a third
-- of the rate of a 100-row enqueue; this is one lookup per type for the
-- whole statement and a few expressions a row (the enqueue-check benchmark,
-- internal/bench/enqueuecheck.go). Not a foreign key to owners either: that would take a KEY SHARE
-- lock on the type's one owners row for each insert, and concurrent
-- enqueues of one type would contend on a MultiXact; this only reads it.
--
-- The checks run after the rows are written and before the statement ends:
-- a refusal fails the statement, so nothing of it is ever stored. The old
-- CHECKs on type and key go: they counted characters, and their message did
-- not say what to do.
ALTER TABLE {{schema}}.outbox DROP CONSTRAINT IF EXISTS outbox_type_check, DROP CONSTRAINT IF EXISTS outbox_key_check;

--
-- It runs with the rights of the role that migrated (SECURITY DEFINER): a
-- producer granted only INSERT on outbox, as version 1 asked, keeps
-- enqueueing without a grant on owners. The fixed search_path keeps a
-- caller's own from resolving the functions it calls.
CREATE FUNCTION {{schema}}.outbox_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad record;
    hdr record;
BEGIN
    -- One query, two scans of the statement's rows: the shape of each row,
    -- then each distinct type against owners (a batch of one type looks it
    -- up once). The shape comes first, so that an overlong type is told it
    -- is too long rather than that no app owns it. The headers are parsed
    -- only when there are some: their values are read with jsonpath, whose
    -- silent mode answers false for headers that are not an object
    -- (json_typeof catches those), and an empty name is looked for only
    -- where the text holds an empty string at all.
    SELECT x.unowned, x.type, x.key, x.headers INTO bad
    FROM (
        SELECT false AS unowned, n.type, n.key, n.headers
        FROM new_rows n
        WHERE n.type = '' OR octet_length(n.type) > 200
           OR n.key = '' OR octet_length(n.key) > 1000
           OR (n.headers::text <> '{}'
               AND (json_typeof(n.headers) <> 'object'
                    OR jsonb_path_exists(n.headers::jsonb, 'strict $.* ? (@.type() != "string")', '{}', true)
                    OR (position('""' IN n.headers::text) > 0 AND n.headers::jsonb ? '')))
        UNION ALL
        SELECT true, t.type, NULL, NULL
        FROM (SELECT DISTINCT type FROM new_rows) t
        WHERE NOT EXISTS (SELECT FROM {{schema}}.owners o WHERE o.kind = 'type' AND o.name = t.type)
    ) x
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF bad.unowned THEN
        -- The type is quoted as a JSON string, which the Go driver reads
        -- back.
        RAISE EXCEPTION 'mensageria: message type % has no owner app in schema %: the app that sends it records it when its relay starts (or run ''mensageria owners register --config …''); nothing was enqueued',
                to_json(bad.type)::text, TG_TABLE_SCHEMA
            USING ERRCODE = 'MS001', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'type';
    END IF;
    IF bad.type = '' OR octet_length(bad.type) > 200 THEN
        RAISE EXCEPTION 'mensageria: message type must be 1 to 200 bytes, got %: name it like "order.created"; nothing was enqueued',
                octet_length(bad.type) || ' bytes'
            USING ERRCODE = 'MS003', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'type';
    END IF;
    IF bad.key = '' OR octet_length(bad.key) > 1000 THEN
        RAISE EXCEPTION 'mensageria: message key must be 1 to 1000 bytes, got %: the key names the business entity (an order id; hash a longer one); nothing was enqueued',
                octet_length(bad.key) || ' bytes'
            USING ERRCODE = 'MS002', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'key';
    END IF;
    IF json_typeof(bad.headers) <> 'object' THEN
        RAISE EXCEPTION 'mensageria: headers must be a JSON object of string values, got a JSON %: write {"name": "value"}; nothing was enqueued',
                json_typeof(bad.headers)
            USING ERRCODE = 'MS004', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'headers';
    END IF;
    SELECT h.key, json_typeof(h.value) AS typ INTO hdr
    FROM json_each(bad.headers) h
    WHERE h.key = '' OR json_typeof(h.value) <> 'string'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'mensageria: header % must be a non-empty name with a JSON string value, got a JSON %: quote the value ({"n": "1"}); nothing was enqueued',
                to_json(hdr.key)::text, hdr.typ
            USING ERRCODE = 'MS004', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'headers';
    END IF;
    -- Only headers whose text and parsed form disagree (a name given twice)
    -- get here.
    RAISE EXCEPTION 'mensageria: headers % must be a JSON object of string values, each name once; nothing was enqueued', bad.headers::text
        USING ERRCODE = 'MS004', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'headers';
END
$$;

CREATE TRIGGER outbox_check AFTER INSERT ON {{schema}}.outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.outbox_check();

-- Again, now that the statements above hold the outbox: a type first
-- enqueued while the scan ran is caught here. Pending and dead rows are read
-- through their indexes, one step per type; the rows delivered meanwhile
-- are in delivered_counts.
WITH RECURSIVE pending(type) AS (
    (SELECT type FROM {{schema}}.outbox WHERE state = 'pending' ORDER BY type LIMIT 1)
    UNION ALL
    SELECT (SELECT o.type FROM {{schema}}.outbox o WHERE o.state = 'pending' AND o.type > p.type ORDER BY o.type LIMIT 1)
    FROM pending p WHERE p.type IS NOT NULL
), dead(type) AS (
    (SELECT type FROM {{schema}}.outbox WHERE state = 'dead' ORDER BY type LIMIT 1)
    UNION ALL
    SELECT (SELECT o.type FROM {{schema}}.outbox o WHERE o.state = 'dead' AND o.type > d.type ORDER BY o.type LIMIT 1)
    FROM dead d WHERE d.type IS NOT NULL
)
INSERT INTO {{schema}}.owners (kind, name)
SELECT 'type', type FROM pending WHERE type IS NOT NULL
UNION
SELECT 'type', type FROM dead WHERE type IS NOT NULL
UNION
SELECT 'type', type FROM {{schema}}.delivered_counts
ON CONFLICT DO NOTHING;
