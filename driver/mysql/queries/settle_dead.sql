-- Dead: the rows {{ids}} (locked by settle_lock.sql) are parked at now
-- (the first argument), each with its error and route, given as CASE
-- lists of (id, value) pairs ({{cases}}, one pair a row; '' is stored as
-- no route); nobody sends them again until an operator revives them.
UPDATE {{p}}outbox
   SET state = 'dead', available_at = ?,
       last_error = CASE id {{cases}} END,
       last_route = NULLIF(CASE id {{cases}} END, ''),
       lease_token = NULL, lease_until = NULL
 WHERE id IN ({{ids}});
