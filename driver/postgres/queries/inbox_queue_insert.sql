-- Stores one accepted delivery as a pending row, due at once, in the
-- receiver's transaction that stored its dedup record just before: the two
-- commit together, so a row always has its record and a record its row. A
-- zero enqueue time ($7 NULL) is unknown and stored as now.
INSERT INTO {{schema}}.inbox_queue (consumer, type, key, message_id, payload, headers, created_at)
VALUES ($1, $2, $3, $4, $5::json, $6::json, coalesce($7::timestamptz, now()))
RETURNING id;
