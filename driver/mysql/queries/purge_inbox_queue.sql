-- Deletes up to ?3 applied rows of consumer ?1 received before ?2: the
-- rows go with their dedup records, after the consumer's window. Pending
-- and dead rows are never deleted. A range of the inbox_queue_applied
-- index (consumer, state, received_at), in its order.
DELETE FROM {{p}}inbox_queue
 WHERE consumer = ? AND state = 'applied' AND received_at < ?
 ORDER BY received_at LIMIT ?;
