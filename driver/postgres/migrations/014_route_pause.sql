-- mensageria schema, version 14: routes an operator paused on purpose
-- (docs/adr/0032-route-pause.md). {{schema}} is replaced by the configured
-- schema name.
--
-- An operator who knows a destination will be down (a maintenance window)
-- pauses its types: every relay of the owning app claims nothing of a
-- paused type until an operator resumes it, whichever relay leads and
-- however often it restarts, so the pause lives here and not in a relay.
-- The type's messages stay pending; nothing is retried, parked or lost.
-- It is apart from route_state's 'paused', the relay's own flow control,
-- which the relay decides and lifts by itself.
--
-- One row per paused type (each type has one owner app); app is the owner
-- that paused it, paused_by and reason who and why, as every view of the
-- pause shows them.
CREATE TABLE {{schema}}.route_pause (
    type      text        PRIMARY KEY,
    app       text        NOT NULL,
    paused_by text        NOT NULL CHECK (paused_by <> '' AND octet_length(paused_by) <= 200),
    reason    text        NOT NULL CHECK (reason <> '' AND octet_length(reason) <= 1000),
    paused_at timestamptz NOT NULL DEFAULT now()
);
