-- Stores the dedup record unless the message is older than the window
-- ($4 NULL skips that check). ON CONFLICT waits for a concurrent twin's
-- transaction, so the loser sees its committed record.
INSERT INTO {{schema}}.inbox (consumer, key, message_id)
SELECT $1, $2, $3
WHERE $4::timestamptz IS NULL OR $4::timestamptz >= now() - $5::interval
ON CONFLICT (consumer, key) DO NOTHING;
