-- An operator's "delivered" for a row in doubt, kept for the delivered
-- retention: marked delivered at {{now}}.
UPDATE {{p}}outbox SET state = 'delivered', delivered_at = {{now}}, lease_token = NULL, lease_until = NULL WHERE id = ?;
