-- Leaves row ?1, still leased to token ?2 under a live lease (?3 is now),
-- in doubt: an at-most-once attempt whose outcome is unknown. The lease is
-- given up and the mark kept (set now when there was none), and a
-- reconcile probe may take the row (claim_in_doubt.sql) once ?4, after
-- ProbeAfter, has come. ?5 is the error, ?6 who gave it ('' stores none).
UPDATE {{p}}outbox
   SET attempted_at = coalesce(attempted_at, ?3), available_at = ?4, last_error = ?5,
       last_route = NULLIF(?6, ''), lease_token = NULL, lease_until = NULL
 WHERE id = ?1 AND state = 'pending' AND lease_token = ?2 AND lease_until > ?3
RETURNING id, type;
