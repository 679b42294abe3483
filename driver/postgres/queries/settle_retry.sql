-- Schedules another attempt of each row ($1) still leased to $2 after its
-- delay ($3, microseconds), with the error ($4) and who gave it ($5: the
-- relaying app and the destination; '' stores none). A row flagged in $6
-- failed on its destination, not on its own: the attempt the claim counted
-- is taken back, so an outage never spends a message's attempts.
-- A retry says the request never reached the receiver (or the receiver
-- says it has no effect), so an at-most-once mark is cleared.
-- The state test's COLLATE "C" keeps every partial index on state out of
-- the plan: the rows are found by the primary key (settle_delivered.sql).
UPDATE {{schema}}.outbox o
SET available_at = now() + r.delay_us * interval '1 microsecond',
    attempts = CASE WHEN r.uncounted THEN greatest(o.attempts - 1, 0) ELSE o.attempts END,
    attempted_at = NULL,
    lease_token = NULL, lease_until = NULL, last_error = r.err, last_route = nullif(r.route, '')
FROM unnest($1::bigint[], $3::bigint[], $4::text[], $5::text[], $6::bool[]) AS r(id, delay_us, err, route, uncounted)
WHERE o.id = r.id AND o.state COLLATE "C" = 'pending' AND o.lease_token = $2 AND o.lease_until > now()
RETURNING o.id;
