-- A retry of the row {{ids}} (locked by settle_lock.sql): due again at
-- the first argument (now plus the backoff), its attempt taken back when
-- the second is 1 (it failed on its destination, not on its own), error
-- and route (the fourth; '' is stored as none, so a row never shows the
-- route of an older attempt next to a newer error) recorded. A retry says
-- the request never reached the receiver, so an at-most-once mark is
-- cleared.
UPDATE {{p}}outbox
   SET available_at = ?, attempts = GREATEST(attempts - ?, 0), attempted_at = NULL,
       last_error = ?, last_route = NULLIF(?, ''), lease_token = NULL, lease_until = NULL
 WHERE id IN ({{ids}});
