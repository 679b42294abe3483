-- Gives the rows of the JSON array ?1, still leased to token ?2 under a
-- live lease (?3 is now), back untried and due at once: the attempt the
-- claim counted is taken back, and an at-most-once mark is cleared (the
-- relay releases only rows it did not send).
UPDATE {{p}}outbox
   SET attempts = max(attempts - 1, 0), available_at = ?3, attempted_at = NULL,
       lease_token = NULL, lease_until = NULL
 WHERE id IN (SELECT value FROM json_each(?1))
   AND state = 'pending' AND lease_token = ?2 AND lease_until > ?3
RETURNING id, type;
