-- Enqueues rows that set available_at too, as insert.sql (the VALUES row
-- repeated at the call): due at the later of the row's NotBefore (unix
-- microseconds, 0 for none) and the database clock {{now}}, so a NotBefore
-- in the past is due at once, as a row without one is.
INSERT INTO {{p}}outbox (message_id, type, `key`, payload, headers, available_at)
VALUES (?, ?, ?, ?, ?, GREATEST(?, {{now}}));
