-- The recorded decisions about messages in doubt, newest first: of the
-- message ids in $1, or all when $1 is empty; at most $2.
SELECT outbox_id, message_id, type, key, outcome, resolved_by, reason, resolved_at
FROM {{schema}}.resolutions
WHERE cardinality($1::uuid[]) = 0 OR message_id = ANY($1::uuid[])
ORDER BY id DESC
LIMIT $2;
