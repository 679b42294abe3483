-- Leaves each row ($1) still leased to $2 in doubt: the outcome of its
-- attempt is unknown (a timeout, a connection cut after the request was
-- written, an answer that does not say, a probe without an answer). The
-- lease is given up and the mark kept (set now if there was none), so no
-- claim takes the row again; the reason ($3) and who gave it ($4) are
-- stored, and a reconcile probe may take it after $5 microseconds.
-- The state test's COLLATE "C" keeps every partial index on state out of
-- the plan: the rows are found by the primary key (settle_delivered.sql).
UPDATE {{schema}}.outbox o
SET attempted_at = coalesce(o.attempted_at, now()),
    available_at = now() + r.delay_us * interval '1 microsecond',
    lease_token = NULL, lease_until = NULL, last_error = r.err, last_route = nullif(r.route, '')
FROM unnest($1::bigint[], $3::text[], $4::text[], $5::bigint[]) AS r(id, err, route, delay_us)
WHERE o.id = r.id AND o.state COLLATE "C" = 'pending' AND o.lease_token = $2 AND o.lease_until > now()
RETURNING o.id;
