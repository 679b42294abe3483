-- Retries of the rows {{ids}} (locked by settle_lock.sql), each with
-- values of its own, given as CASE lists of (id, value) pairs ({{cases}},
-- one pair a row, in this order): due again at now plus its backoff, its
-- attempt taken back when the second value is 1 (it failed on its
-- destination, not on its own), its error and route ('' is stored as
-- none, so a row never shows the route of an older attempt next to a
-- newer error). One statement for every retry of a settle's chunk instead
-- of one a row. A retry says the request never reached the receiver, so an
-- at-most-once mark is cleared.
UPDATE {{p}}outbox
   SET available_at = CASE id {{cases}} END,
       attempts = GREATEST(attempts - CASE id {{cases}} END, 0),
       last_error = CASE id {{cases}} END,
       last_route = NULLIF(CASE id {{cases}} END, ''),
       attempted_at = NULL, lease_token = NULL, lease_until = NULL
 WHERE id IN ({{ids}});
