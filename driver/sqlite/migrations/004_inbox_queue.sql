-- The inbox queue: where `mensageria receive` lands the deliveries an app
-- in any language applies by SQL (docs/config.md, "The inbox queue SQL
-- protocol"). SQLite has no functions of its own, so the protocol is plain
-- statements (queries/inbox_*.sql) in a BEGIN IMMEDIATE transaction of the
-- app's; the table below holds them to the same rule the PostgreSQL
-- functions do. Valid on SQLite 3.31 and later, like every migration.
--
-- Times are integer microseconds of the database clock, as in every table.

-- One row per accepted delivery, stored by the receiver in the transaction
-- that stores its dedup record in {{p}}inbox. No lease columns: a claim
-- runs inside the app's write transaction, which holds the database's one
-- write lock until it ends, so no other applier can take the same row.
CREATE TABLE {{p}}inbox_queue (
    -- AUTOINCREMENT so ids are never reused after a purge: an app may keep
    -- them, and logs quote them.
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer     TEXT    NOT NULL CHECK (consumer <> ''),
    type         TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    payload      TEXT    NOT NULL CHECK (json_valid(payload)),
    headers      TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(headers)),
    created_at   INTEGER NOT NULL, -- the sender's enqueue time
    received_at  INTEGER NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'applied', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    available_at INTEGER NOT NULL,
    applied_at   INTEGER,
    last_error   TEXT
);

-- The claim: one consumer's due pending rows in order.
CREATE INDEX {{p}}inbox_queue_claim ON {{p}}inbox_queue (consumer, available_at, id) WHERE state = 'pending';
-- The purge: one consumer's oldest applied rows.
CREATE INDEX {{p}}inbox_queue_applied ON {{p}}inbox_queue (consumer, received_at) WHERE state = 'applied';
CREATE INDEX {{p}}inbox_queue_dead ON {{p}}inbox_queue (consumer, id) WHERE state = 'dead';

-- An applied row never changes again and a dead one only goes back to
-- pending, so no statement can apply a row twice. RAISE takes a literal
-- only; the driver names the row.
CREATE TRIGGER {{p}}inbox_queue_guard BEFORE UPDATE ON {{p}}inbox_queue
WHEN OLD.state = 'applied' OR (OLD.state = 'dead' AND NEW.state <> 'pending')
BEGIN
    SELECT RAISE(ABORT, 'mensageria: inbox queue row is not pending: an applied row never changes and a dead one only goes back to pending; roll back');
END;
