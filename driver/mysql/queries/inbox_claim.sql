-- The app's claim (docs/mysql.md): up to ?2 due pending rows of consumer
-- ?1, oldest first, locked to the app's transaction until it ends.
-- Another applier's claim skips them (SKIP LOCKED), so appliers in
-- parallel take different rows. {{now}} is the database clock in
-- microseconds. One range of the inbox_queue_claim index (consumer,
-- state, available_at, id), which also gives the order, so LIMIT stops
-- the walk: other consumers' rows and applied ones are never read.
SELECT id, consumer, type, `key`, message_id, payload, headers, created_at, received_at, state, attempts, available_at, COALESCE(last_error, '')
  FROM {{p}}inbox_queue
 WHERE consumer = ? AND state = 'pending' AND available_at <= {{now}}
 ORDER BY available_at, id LIMIT ?
   FOR UPDATE SKIP LOCKED;
