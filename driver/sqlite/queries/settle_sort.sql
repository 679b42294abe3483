-- Of the rows of the JSON array ?1 a settle by token ?2 did not change, the
-- ones still leased to ?2 with the lease run out at ?3 (now): expired.
-- Every other one was claimed again under another token, or settled and
-- deleted by another relay (fenced). Read in the settle's transaction, and
-- only when it left rows unchanged.
SELECT id FROM {{p}}outbox
 WHERE id IN (SELECT value FROM json_each(?1))
   AND state = 'pending' AND lease_token = ?2 AND lease_until <= ?3;
