-- Stores one accepted delivery as a pending row, due at once, in the
-- receiver's transaction that stored its dedup record just before:
-- consumer, type, key, message id, payload, headers, and the sender's
-- enqueue time (NULL when unknown, stored as now).
INSERT INTO {{p}}inbox_queue (consumer, type, `key`, message_id, payload, headers, created_at, received_at, available_at)
VALUES (?, ?, ?, ?, ?, ?, COALESCE(?, {{now}}), {{now}}, {{now}});
