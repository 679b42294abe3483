-- Dead: the row {{ids}} (locked by settle_lock.sql) is parked at now
-- (the first argument) with its error and route ('' stored as none);
-- nobody sends it again until an operator revives it.
UPDATE {{p}}outbox
   SET state = 'dead', available_at = ?, last_error = ?, last_route = NULLIF(?, ''),
       lease_token = NULL, lease_until = NULL
 WHERE id IN ({{ids}});
