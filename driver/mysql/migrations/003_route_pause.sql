-- Routes an operator paused on purpose (docs/adr/0032-route-pause.md):
-- every relay of the owning app claims nothing of a paused type until an
-- operator resumes it, whichever relay leads and however often it
-- restarts, so the pause lives here and not in a relay. The type's
-- messages stay pending. Apart from route_state's 'paused', the relay's
-- own flow control. One row per paused type; paused_at is microseconds
-- since the epoch on the database clock.
CREATE TABLE IF NOT EXISTS {{p}}route_pause (
    type      VARBINARY(200)  NOT NULL PRIMARY KEY,
    app       VARBINARY(200)  NOT NULL,
    paused_by VARBINARY(200)  NOT NULL,
    reason    VARBINARY(1000) NOT NULL,
    paused_at BIGINT          NOT NULL,
    CONSTRAINT {{p}}route_pause_by CHECK (paused_by <> ''),
    CONSTRAINT {{p}}route_pause_reason CHECK (reason <> '')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
