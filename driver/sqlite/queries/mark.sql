-- Marks the rows of the JSON array ?2 still leased to token ?3 under a
-- live lease (?1 is now) and not marked yet, as attempted on an
-- at-most-once route: from now on the request may reach the receiver, so
-- no claim takes them again until a definite outcome clears the mark. The
-- driver runs it alone in a transaction committed with synchronous=FULL,
-- before anything is sent; only the rows it returns may be sent.
UPDATE {{p}}outbox SET attempted_at = ?1
 WHERE id IN (SELECT value FROM json_each(?2))
   AND state = 'pending' AND lease_token = ?3 AND lease_until > ?1 AND attempted_at IS NULL
RETURNING id;
