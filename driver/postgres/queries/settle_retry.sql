-- Schedules another attempt of each row ($1) still leased to $2 after its
-- delay ($3, microseconds), with the error ($4) and who gave it ($5: the
-- relaying app and the destination; '' stores none).
UPDATE {{schema}}.outbox o
SET available_at = now() + r.delay_us * interval '1 microsecond',
    lease_token = NULL, lease_until = NULL, last_error = r.err, last_route = nullif(r.route, '')
FROM unnest($1::bigint[], $3::bigint[], $4::text[], $5::text[]) AS r(id, delay_us, err, route)
WHERE o.id = r.id AND o.state = 'pending' AND o.lease_token = $2 AND o.lease_until > now()
RETURNING o.id;
