-- Stores one accepted delivery as a pending row, due at once, in the
-- receiver's transaction that stored its dedup record just before. A zero
-- enqueue time (?7 NULL) is unknown and stored as now.
INSERT INTO {{p}}inbox_queue (consumer, type, key, message_id, payload, headers, created_at, received_at, available_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, coalesce(?7, {{now}}), {{now}}, {{now}});
