-- Parks row ?1, still leased to token ?2 under a live lease (?3 is now),
-- as dead with the error ?4 and who gave it ?5 ('' stores none). Its
-- available_at becomes the time it died.
UPDATE {{p}}outbox
   SET state = 'dead', available_at = ?3, last_error = ?4, last_route = NULLIF(?5, ''),
       lease_token = NULL, lease_until = NULL
 WHERE id = ?1 AND state = 'pending' AND lease_token = ?2 AND lease_until > ?3
RETURNING id, type;
