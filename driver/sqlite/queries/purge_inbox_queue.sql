-- Deletes up to ?3 applied rows of consumer ?1 received before ?2: the
-- rows go with their dedup records, after the consumer's window (the
-- caller reads it from the catalog, for the consumers its app owns).
-- Pending and dead rows are never deleted.
DELETE FROM {{p}}inbox_queue
 WHERE id IN (SELECT id FROM {{p}}inbox_queue
               WHERE consumer = ?1 AND state = 'applied' AND received_at < ?2
               ORDER BY received_at LIMIT ?3);
