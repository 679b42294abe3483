-- Deletes up to ?3 dedup records of consumer ?1 received before ?2 (now
-- minus the consumer's window), oldest first: a range of the
-- inbox_consumer_received index (consumer, received_at).
DELETE FROM {{p}}inbox
 WHERE consumer = ? AND received_at < ?
 ORDER BY received_at LIMIT ?;
