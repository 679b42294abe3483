-- Every settle is fenced by the lease: the token must still be ours and the
-- lease unexpired, or another relay may own the row now.
UPDATE {{schema}}.outbox
SET state = 'delivered', delivered_at = now(), lease_token = NULL, lease_until = NULL, last_error = NULL
WHERE id = ANY($1::bigint[]) AND state = 'pending' AND lease_token = $2 AND lease_until > now();
