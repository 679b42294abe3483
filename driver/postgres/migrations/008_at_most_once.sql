-- mensageria schema, version 8: at-most-once routes and messages in doubt
-- (docs/adr/0015-at-most-once-in-doubt.md).
-- {{schema}} is replaced by the configured schema name.
--
-- attempted_at is the mark a relay commits, synchronously, before it sends
-- a message on an at-most-once route (queries/mark.sql). While it is set
-- the request may have reached the receiver: no claim takes the row again
-- (queries/claim.sql), and once the row's lease is no longer live it is in
-- doubt until a reconcile probe or an operator says what happened. A
-- definite "not sent" (a retry, a release) clears it. Adding a nullable
-- column without a default rewrites nothing.
ALTER TABLE {{schema}}.outbox ADD COLUMN attempted_at timestamptz;

-- Rows in doubt, for the reconcile probe, status and 'mensageria doubt
-- list', without reading the pending rows; it holds only marked rows, so
-- it stays as small as the number of attempts under way and in doubt. The
-- claim's update sets lease columns only and stays a HOT update.
CREATE INDEX outbox_doubt_idx ON {{schema}}.outbox (type, id) WHERE state = 'pending' AND attempted_at IS NOT NULL;

-- Every decision about a message in doubt, by whom, when and why: kept
-- after the outbox row is deleted (a delivered resolution deletes it).
CREATE TABLE {{schema}}.resolutions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id   bigint      NOT NULL,
    message_id  uuid        NOT NULL,
    type        text        NOT NULL,
    key         text        NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead')),
    resolved_by text        NOT NULL CHECK (resolved_by <> ''),
    reason      text        NOT NULL CHECK (reason <> ''),
    resolved_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX resolutions_message_idx ON {{schema}}.resolutions (message_id);
