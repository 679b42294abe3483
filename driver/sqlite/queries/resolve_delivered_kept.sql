-- An operator's "delivered" for row ?1 in doubt, kept for the delivered
-- retention: marked delivered at ?2.
UPDATE {{p}}outbox SET state = 'delivered', delivered_at = ?2, lease_token = NULL, lease_until = NULL WHERE id = ?1;
