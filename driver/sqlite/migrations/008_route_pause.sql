-- Routes an operator paused on purpose (docs/adr/0032-route-pause.md):
-- every relay of the owning app claims nothing of a paused type until an
-- operator resumes it, whichever relay leads and however often it
-- restarts, so the pause lives here and not in a relay. The type's
-- messages stay pending. Apart from route_state's 'paused', the relay's
-- own flow control.
--
-- One row per paused type; app is the owner that paused it, paused_by and
-- reason who and why. paused_at is microseconds since the epoch on the
-- database clock.
CREATE TABLE {{p}}route_pause (
    type      TEXT    NOT NULL PRIMARY KEY,
    app       TEXT    NOT NULL,
    paused_by TEXT    NOT NULL CHECK (paused_by <> '' AND length(CAST(paused_by AS BLOB)) <= 200),
    reason    TEXT    NOT NULL CHECK (reason <> '' AND length(CAST(reason AS BLOB)) <= 1000),
    paused_at INTEGER NOT NULL
) WITHOUT ROWID;
