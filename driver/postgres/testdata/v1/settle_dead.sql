UPDATE {{schema}}.outbox o
SET state = 'dead', lease_token = NULL, lease_until = NULL, last_error = r.err
FROM unnest($1::bigint[], $3::text[]) AS r(id, err)
WHERE o.id = r.id AND o.state = 'pending' AND o.lease_token = $2 AND o.lease_until > now();
