-- One election round of a relay ($2, "host/pid/id") for app $1: takes the
-- app's lease row when it has no live holder, or renews it when $2 holds
-- it, for $3 microseconds on the database clock. A takeover bumps the
-- epoch that fences every claim (claim.sql), and $2's own renewal keeps
-- it, even past expiry: no one else led in between, or holder would name
-- them. $4 is what the relay says of its own health ('' when ready).
-- No row comes back when another relay's lease still runs.
--
-- Only a role granted INSERT and UPDATE on the table can take part: a
-- session with no grants cannot hold the election, as it could hold an
-- advisory lock (ADR 0025).
INSERT INTO {{schema}}.leader AS l (app, epoch, holder, since, expires_at, health)
VALUES ($1, 1, $2, now(), now() + $3::bigint * interval '1 microsecond', $4)
ON CONFLICT (app) DO UPDATE
SET epoch      = CASE WHEN l.holder = excluded.holder THEN l.epoch ELSE l.epoch + 1 END,
    since      = CASE WHEN l.holder = excluded.holder THEN l.since ELSE now() END,
    holder     = excluded.holder,
    expires_at = excluded.expires_at,
    health     = excluded.health
WHERE l.holder = excluded.holder OR l.holder = '' OR l.expires_at <= now()
RETURNING epoch;
