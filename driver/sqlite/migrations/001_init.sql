-- {{p}} is the table-name prefix (Config.Schema + "_"). Times are integer
-- unix microseconds from the database clock, so every replica compares
-- leases against the same clock.

-- A plain INSERT INTO {{p}}outbox (type, key, payload) VALUES (...) is a
-- complete enqueue: every other column has a default.
CREATE TABLE {{p}}outbox (
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
    type         TEXT    NOT NULL CHECK (type <> ''),
    key          TEXT    NOT NULL CHECK (key <> ''),
    payload      TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(payload)),
    headers      TEXT    CHECK (headers IS NULL OR json_valid(headers)),
    state        TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    -- Next moment the row may be claimed. A claim moves it to the end of
    -- the lease, so one range scan finds rows that are both due and not
    -- leased.
    available_at INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    lease_token  INTEGER,
    lease_until  INTEGER,
    created_at   INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    delivered_at INTEGER,
    last_error   TEXT
);

-- Serves the claim: one range scan per registered type over due rows.
CREATE INDEX {{p}}outbox_claim ON {{p}}outbox (type, available_at, id) WHERE state = 'pending';
-- Serves the per-key order check: "is there an older unsettled row of this key?"
CREATE INDEX {{p}}outbox_key ON {{p}}outbox (type, key, id) WHERE state = 'pending';
CREATE INDEX {{p}}outbox_delivered ON {{p}}outbox (delivered_at) WHERE state = 'delivered';
CREATE INDEX {{p}}outbox_dead ON {{p}}outbox (type, id) WHERE state = 'dead';

CREATE TABLE {{p}}inbox (
    consumer    TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    message_id  TEXT    NOT NULL,
    received_at INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    PRIMARY KEY (consumer, key)
) WITHOUT ROWID;

CREATE INDEX {{p}}inbox_received ON {{p}}inbox (received_at);

CREATE TABLE {{p}}offsets (
    consumer   TEXT    NOT NULL,
    source     TEXT    NOT NULL,
    partition  INTEGER NOT NULL,
    "offset"   INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, source, partition)
) WITHOUT ROWID;

-- One lease row per app: the relay election.
CREATE TABLE {{p}}leader (
    app        TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL DEFAULT '',
    epoch      INTEGER NOT NULL,
    since      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
