UPDATE {{schema}}.outbox o
SET available_at = now() + r.delay_us * interval '1 microsecond',
    lease_token = NULL, lease_until = NULL, last_error = r.err
FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS r(id, delay_us, err)
WHERE o.id = r.id AND o.state = 'pending' AND o.lease_token = $2 AND o.lease_until > now();
