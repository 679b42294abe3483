-- mensageria schema, version 3: the state of each route's flow control, as
-- the active relay last recorded it, so that another process ('mensageria
-- status', a dashboard's query) can tell a paused destination from an idle
-- one. Nothing in the relay reads it back: a restarted relay starts every
-- route flowing, and the rows of a paused route are scheduled for its
-- probe anyway, so no outage is forgotten.
--
-- One row per message type (each has one owner app, so the type alone is
-- the key); the types of one Sender share their route and carry the same
-- state. Written only on a transition, never per delivery.
CREATE TABLE {{schema}}.route_state (
    type       text        PRIMARY KEY,
    app        text        NOT NULL,
    route      text        NOT NULL,
    state      text        NOT NULL CHECK (state IN ('flowing', 'paused', 'probing')),
    -- since and until are the relay's clock, as it logged them; updated_at
    -- is the database's, to tell a stale record from a fresh one.
    since      timestamptz NOT NULL,
    until      timestamptz,
    failures   integer     NOT NULL DEFAULT 0 CHECK (failures >= 0),
    last_error text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
