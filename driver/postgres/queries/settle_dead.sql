-- Parks each row ($1) still leased to $2 as dead, with its reason ($3) and
-- who gave it ($4, as in settle_retry.sql): a dead letter says which app and
-- which destination refused it.
-- The state test's COLLATE "C" keeps every partial index on state out of
-- the plan: the rows are found by the primary key (settle_delivered.sql).
UPDATE {{schema}}.outbox o
SET state = 'dead', lease_token = NULL, lease_until = NULL, last_error = r.err, last_route = nullif(r.route, '')
FROM unnest($1::bigint[], $3::text[], $4::text[]) AS r(id, err, route)
WHERE o.id = r.id AND o.state COLLATE "C" = 'pending' AND o.lease_token = $2 AND o.lease_until > now()
RETURNING o.id;
