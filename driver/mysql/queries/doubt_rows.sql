-- The rows of ids {{ids}} in doubt at {{now}}: pending, marked, not under
-- a live lease (a row being sent or probed is not); locked, so they stay
-- in doubt until Resolve commits. Primary-key lookups.
SELECT id, message_id, type, `key` FROM {{p}}outbox
 WHERE id IN ({{ids}})
   AND state = 'pending' AND attempted_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= {{now}})
   FOR UPDATE;
