-- Enqueues rows, in the caller's transaction or one of the driver's own:
-- message id, type, key, payload, headers (NULL for none). The VALUES row
-- is written once here and repeated at the call, once per row (up to
-- chunk rows a statement); the other columns take their defaults, so the
-- row is due at once (available_at is the database clock). The outbox's
-- triggers hold the row to the same rules as a plain INSERT's (refusal
-- in insert.go).
INSERT INTO {{p}}outbox (message_id, type, `key`, payload, headers)
VALUES (?, ?, ?, ?, ?);
