-- Deletes up to ?3 dedup records of consumer ?1 received before ?2 (now
-- minus the consumer's window), oldest first on the (consumer,
-- received_at) index.
DELETE FROM {{p}}inbox
 WHERE consumer = ?1
   AND key IN (SELECT key FROM {{p}}inbox WHERE consumer = ?1 AND received_at < ?2 ORDER BY received_at LIMIT ?3);
