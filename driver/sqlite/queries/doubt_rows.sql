-- The rows of the JSON array ?2 that are in doubt at ?1: pending, marked,
-- not under a live lease (a row being sent or probed is not). Resolve
-- reads them inside its write transaction, so they stay in doubt until it
-- commits.
SELECT id, message_id, type, key FROM {{p}}outbox
 WHERE id IN (SELECT value FROM json_each(?2))
   AND state = 'pending' AND attempted_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= ?1);
