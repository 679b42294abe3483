-- The app's claim, through the function the migration made
-- (migrations/003_inbox_queue.sql), so Go callers and the conformance suite
-- run exactly what the SQL protocol documents.
SELECT id, consumer, type, key, message_id, payload::text, headers::text, created_at, received_at, state, attempts, available_at, coalesce(last_error, '')
FROM {{schema}}.inbox_claim($1, $2);
