-- At-most-once routes and messages in doubt
-- (docs/adr/0015-at-most-once-in-doubt.md).
--
-- attempted_at (microseconds of the database clock) is the mark a relay
-- commits, with synchronous=FULL, before it sends a message on an
-- at-most-once route. While it is set the request may have reached the
-- receiver: no claim takes the row again, and once the row's lease is no
-- longer live it is in doubt until a reconcile probe or an operator says
-- what happened. A definite "not sent" (a retry, a release) clears it.
ALTER TABLE {{p}}outbox ADD COLUMN attempted_at INTEGER;

-- Rows in doubt, for the reconcile probe, status and 'mensageria doubt
-- list'; it holds only marked rows.
CREATE INDEX {{p}}outbox_doubt ON {{p}}outbox (type, id) WHERE state = 'pending' AND attempted_at IS NOT NULL;

-- Every decision about a message in doubt, by whom, when and why: kept
-- after the outbox row is deleted (a delivered resolution deletes it).
CREATE TABLE {{p}}resolutions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id   INTEGER NOT NULL,
    message_id  TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    outcome     TEXT    NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead')),
    resolved_by TEXT    NOT NULL CHECK (resolved_by <> ''),
    reason      TEXT    NOT NULL CHECK (reason <> ''),
    resolved_at INTEGER NOT NULL
);
CREATE INDEX {{p}}resolutions_message ON {{p}}resolutions (message_id);
