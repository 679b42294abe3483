-- Schedules another attempt of row ?1 still leased to token ?2 under a
-- live lease (?3 is now): due at ?4, with the error ?6 and who gave it ?7
-- (the relaying app and the destination; '' stores none, so a row never
-- shows the route of an older attempt next to a newer error). ?5 is 1 when
-- the retry is uncounted: the row failed on its destination, not on its
-- own, and the attempt the claim counted is taken back, so an outage never
-- spends a message's attempts.
-- A retry says the request never reached the receiver, so an at-most-once
-- mark is cleared.
UPDATE {{p}}outbox
   SET available_at = ?4, attempts = max(attempts - ?5, 0), attempted_at = NULL,
       last_error = ?6, last_route = NULLIF(?7, ''), lease_token = NULL, lease_until = NULL
 WHERE id = ?1 AND state = 'pending' AND lease_token = ?2 AND lease_until > ?3
RETURNING id, type;
