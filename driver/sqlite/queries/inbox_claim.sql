-- The app's claim (docs/config.md): up to ?2 due pending rows of consumer
-- ?1, oldest first. It takes no lock of its own: the caller's transaction,
-- begun with BEGIN IMMEDIATE, holds the database's write lock until it
-- commits, so no other applier runs meanwhile. {{now}} is the database
-- clock in microseconds.
SELECT id, consumer, type, key, message_id, payload, headers, created_at, received_at, state, attempts, available_at, coalesce(last_error, '')
  FROM {{p}}inbox_queue
 WHERE consumer = ? AND state = 'pending' AND available_at <= {{now}}
 ORDER BY available_at, id LIMIT ?;
