-- The ownership catalog, and an outbox that a plain INSERT from any client
-- can use and cannot misuse.
--
-- Everything here runs in the migration's one transaction (Migrate, or the
-- team's own tool with MigrationSQL): a crash halfway leaves version 2 as it
-- was. Every statement is valid on SQLite 3.31 and later, the oldest that
-- distributions still ship, because other programs write to these tables
-- with the SQLite library their platform has.

-- Who owns what. A type's owner is the only app that may enqueue it and the
-- only one whose relay claims it; a consumer's owner purges its inbox
-- records after dedup_window_us; the 'migrations' row (name 'schema') names
-- the one app allowed to migrate the schema up.
CREATE TABLE {{p}}owners (
    kind            TEXT    NOT NULL CHECK (kind IN ('type', 'consumer', 'kafka_transactional_id', 'migrations')),
    name            TEXT    NOT NULL CHECK (name <> ''),
    -- NULL is "unclaimed": a type this upgrade found in use, which its old
    -- producers may keep enqueueing until the first app to register it
    -- takes it over.
    app             TEXT    CHECK (app IS NULL OR app <> ''),
    -- NULL keeps a consumer's records forever (an inbox without a
    -- staleness check has no window after which a duplicate is harmless).
    dedup_window_us INTEGER CHECK (dedup_window_us IS NULL OR dedup_window_us > 0),
    since           INTEGER NOT NULL DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;

-- Serves "what does this app own" (Register's unlisted entries, Purge's
-- consumers) without a scan of every type.
CREATE INDEX {{p}}owners_app ON {{p}}owners (app, kind);

-- The outbox's identity, made here once per database: records kept outside
-- it (a Kafka transactional position) name the outbox they belong to, so a
-- relay never reconciles its rows against another outbox's. Random at
-- apply time, so one printed script applied to two databases still gives
-- two identities.
CREATE TABLE {{p}}identity (
    one        INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    outbox_id  TEXT    NOT NULL CHECK (length(outbox_id) = 36),
    created_at INTEGER NOT NULL
);
INSERT INTO {{p}}identity (one, outbox_id, created_at) VALUES (1,
    lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
    substr(lower(hex(randomblob(2))), 2) || '-' ||
    substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' ||
    lower(hex(randomblob(6))),
    CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000);

-- Version 1's defaults read the clock with unixepoch('subsec'), which only
-- SQLite 3.42 understands: older libraries (Python's sqlite3 on Debian 12
-- is 3.40) get NULL and fail the NOT NULL. SQLite cannot change a column's
-- default in place, so both tables with such defaults are rebuilt: create,
-- copy, drop, rename, as https://www.sqlite.org/lang_altertable.html
-- prescribes. julianday('now') has the same millisecond resolution and has
-- existed for ever; rounding to the millisecond first keeps float error
-- out of the microsecond digits.
--
-- Dropping a table drops the triggers on it. A team's own trigger on the
-- outbox or the inbox would vanish without a word, so the upgrade stops
-- instead (the CHECK's name is the message) and the team recreates its
-- triggers after it.
CREATE TEMP TABLE {{p}}upgrade_guard (
    own_triggers INTEGER CONSTRAINT "mensageria: drop your own triggers on {{p}}outbox and {{p}}inbox before this upgrade, and create them again after it" CHECK (own_triggers = 0)
);
INSERT INTO {{p}}upgrade_guard (own_triggers)
    SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN ('{{p}}outbox', '{{p}}inbox');
DROP TABLE {{p}}upgrade_guard;
-- A team's views on the tables keep working: the legacy rename leaves them
-- naming the table, which exists again once renamed, where the modern one
-- would refuse to rename while a view names a table just dropped.
PRAGMA legacy_alter_table = ON;

CREATE TABLE {{p}}outbox_new (
    -- AUTOINCREMENT so ids are never reused after a purge: operators page
    -- with them and logs quote them.
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    -- A random (version 4) UUID when the caller gives none; the library
    -- always gives a UUIDv7.
    message_id   TEXT    NOT NULL UNIQUE DEFAULT (
                     lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
                     substr(lower(hex(randomblob(2))), 2) || '-' ||
                     substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' ||
                     lower(hex(randomblob(6))))
                     CHECK (length(message_id) = 36),
    -- The shape rules of an enqueue, the Go API's own, for every client.
    -- Each constraint's name is the message a refused INSERT gets
    -- ("CHECK constraint failed: mensageria: ..."). Lengths are bytes of
    -- UTF-8, the unit of the Go API and the OpenAPI document.
    type         TEXT    NOT NULL
        CONSTRAINT "mensageria: the message type is empty; give the type the receiving app routes" CHECK (type <> '')
        CONSTRAINT "mensageria: the message type is longer than 200 bytes; use a shorter type name" CHECK (length(CAST(type AS BLOB)) <= 200)
        CONSTRAINT "mensageria: the message type contains a NUL character; remove it" CHECK (instr(CAST(type AS BLOB), x'00') = 0),
    key          TEXT    NOT NULL
        CONSTRAINT "mensageria: the key is empty; give every message its natural key (at most 1000 bytes)" CHECK (key <> '')
        CONSTRAINT "mensageria: the key is longer than 1000 bytes of UTF-8; use a shorter natural key, such as an id" CHECK (length(CAST(key AS BLOB)) <= 1000)
        CONSTRAINT "mensageria: the key contains a NUL character; remove it" CHECK (instr(CAST(key AS BLOB), x'00') = 0),
    payload      TEXT    NOT NULL DEFAULT '{}'
        CONSTRAINT "mensageria: the payload is not a valid JSON document; give JSON text (omit it for {})" CHECK (json_valid(payload)),
    headers      TEXT
        CONSTRAINT "mensageria: the headers are not valid JSON; give NULL or a JSON object of strings" CHECK (headers IS NULL OR json_valid(headers)),
    state        TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    -- Next moment the row may be claimed. A claim moves it to the end of
    -- the lease, so one range scan finds rows that are both due and not
    -- leased.
    available_at INTEGER NOT NULL DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    lease_token  INTEGER,
    lease_until  INTEGER,
    created_at   INTEGER NOT NULL DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    delivered_at INTEGER,
    last_error   TEXT,
    -- Which app and destination gave last_error ("pedidos → http
    -- https://billing/m2m"): a dead row says who refused it.
    last_route   TEXT
);
INSERT INTO {{p}}outbox_new (id, message_id, type, key, payload, headers, state, attempts,
                             available_at, lease_token, lease_until, created_at, delivered_at, last_error)
    SELECT id, message_id, type, key, payload, headers, state, attempts,
           available_at, lease_token, lease_until, created_at, delivered_at, last_error
    FROM {{p}}outbox;
-- The copy only moves the new table's counter to the largest id left, but
-- ids of rows already deleted were handed out too: carry the old counter
-- over so none is ever given again.
DELETE FROM sqlite_sequence WHERE name = '{{p}}outbox_new';
INSERT INTO sqlite_sequence (name, seq) SELECT '{{p}}outbox_new', seq FROM sqlite_sequence WHERE name = '{{p}}outbox';
DROP TABLE {{p}}outbox;
ALTER TABLE {{p}}outbox_new RENAME TO {{p}}outbox;

-- Serves the claim: one range scan per registered type over due rows.
CREATE INDEX {{p}}outbox_claim ON {{p}}outbox (type, available_at, id) WHERE state = 'pending';
-- Serves the per-key order check: "is there an older unsettled row of this key?"
CREATE INDEX {{p}}outbox_key ON {{p}}outbox (type, key, id) WHERE state = 'pending';
-- Serves the purge, which deletes only the purging app's types.
CREATE INDEX {{p}}outbox_delivered ON {{p}}outbox (type, delivered_at) WHERE state = 'delivered';
CREATE INDEX {{p}}outbox_dead ON {{p}}outbox (type, id) WHERE state = 'dead';

CREATE TABLE {{p}}inbox_new (
    consumer     TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    received_at  INTEGER NOT NULL DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    -- A digest of the payload that applied the effect, so the same key
    -- with a different payload is told apart from a redelivery. NULL for
    -- records kept from before this version.
    payload_hash BLOB,
    PRIMARY KEY (consumer, key)
) WITHOUT ROWID;
INSERT INTO {{p}}inbox_new (consumer, key, message_id, received_at)
    SELECT consumer, key, message_id, received_at FROM {{p}}inbox;
DROP TABLE {{p}}inbox;
ALTER TABLE {{p}}inbox_new RENAME TO {{p}}inbox;

PRAGMA legacy_alter_table = OFF;

-- Each consumer is purged after its own window: one range per consumer,
-- oldest first.
CREATE INDEX {{p}}inbox_consumer_received ON {{p}}inbox (consumer, received_at);

-- The upgrade of a populated outbox must not strand anything: every type
-- already in use is recorded unclaimed, so its producers (old relays, plain
-- INSERTs) keep enqueueing it, and its rows stay pending until the app that
-- owns it registers.
INSERT INTO {{p}}owners (kind, name, app)
    SELECT 'type', type, NULL FROM {{p}}outbox
    UNION
    SELECT 'type', type, NULL FROM {{p}}delivered_counts;

-- The rules a column CHECK cannot state, because they read another table
-- or every member of the headers: the type must have an entry in the
-- catalog (app NULL, unclaimed, counts), and the headers must be an object
-- of strings. One trigger rather than two: each costs a sub-program per
-- row, and SQLite does not document the order in which triggers fire. A
-- type that breaks a shape rule is left to its CHECK, whose message says
-- more than "no owner". RAISE takes only a literal, so the messages cannot
-- quote the value; the library names the type itself. A trigger rather
-- than a foreign key: foreign keys are off unless each client turns them
-- on (Python's sqlite3 does not), and one would also forbid releasing a
-- type that still has rows. The payload is the column CHECK's alone:
-- parsing a payload of megabytes twice would double the cost of the one
-- rule that grows with the row.
CREATE TRIGGER {{p}}outbox_enqueue_rules BEFORE INSERT ON {{p}}outbox
BEGIN
    SELECT CASE
        WHEN length(CAST(NEW.type AS BLOB)) BETWEEN 1 AND 200
             AND NOT EXISTS (SELECT 1 FROM {{p}}owners WHERE kind = 'type' AND name = NEW.type) THEN
            RAISE(ABORT, 'mensageria: the message type has no owner app in {{p}}owners, so no relay would ever deliver it; nothing was enqueued (the app that sends it records it when its relay starts, or run ''mensageria owners register'')')
        WHEN NEW.headers IS NULL THEN NULL
        WHEN NOT json_valid(NEW.headers) THEN
            RAISE(ABORT, 'mensageria: the headers are not valid JSON; give NULL or a JSON object of strings, such as {"x-request-id":"r1"}')
        WHEN json_type(NEW.headers) <> 'object' THEN
            RAISE(ABORT, 'mensageria: the headers are not a JSON object; give NULL or a JSON object of strings, such as {"x-request-id":"r1"}')
        WHEN EXISTS (SELECT 1 FROM json_each(NEW.headers) WHERE type <> 'text' OR key = '') THEN
            RAISE(ABORT, 'mensageria: every header needs a non-empty name and a string value (numbers, booleans, null and objects would be dropped on the wire); quote the value')
    END;
END;
