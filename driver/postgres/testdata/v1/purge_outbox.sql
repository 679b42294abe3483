DELETE FROM {{schema}}.outbox WHERE id IN (
    SELECT id FROM {{schema}}.outbox
    WHERE state = 'delivered' AND delivered_at < now() - $1::interval
    ORDER BY delivered_at LIMIT $2);
