-- settle_delivered.sql when delivered rows are kept for a retention
-- period: marked delivered at ?3 (now) instead of deleted, for Purge
-- (purge_outbox.sql) to delete later. Same lease guard, same RETURNING.
UPDATE {{p}}outbox
   SET state = 'delivered', delivered_at = ?3, lease_token = NULL, lease_until = NULL
 WHERE id IN (SELECT value FROM json_each(?1))
   AND state = 'pending' AND lease_token = ?2 AND lease_until > ?3
RETURNING id, type;
