-- The state of each route's flow control, as the active relay last
-- recorded it, so that another process ('mensageria status') can tell a
-- paused destination from an idle one. Nothing in the relay reads it back:
-- a restarted relay starts every route flowing, and the rows of a paused
-- route are scheduled for its probe anyway.
--
-- One row per message type (each has one owner app); the types of one
-- Sender share their route and carry the same state. Written only on a
-- transition, never per delivery. Times are microseconds since the epoch:
-- since and until as the relay's clock saw them, updated_at the database's.
CREATE TABLE {{p}}route_state (
    type       TEXT    NOT NULL PRIMARY KEY,
    app        TEXT    NOT NULL,
    route      TEXT    NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('flowing', 'paused', 'probing')),
    since      INTEGER NOT NULL,
    until      INTEGER,
    failures   INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    last_error TEXT,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
