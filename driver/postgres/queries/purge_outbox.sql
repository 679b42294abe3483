-- Deletes up to $2 delivered rows of the app's types ($3) delivered more
-- than $1 ago. One seek per type on outbox_delivered_type_idx: another app
-- that keeps its delivered rows longer is never stepped over. The ids are
-- gathered first, so the delete is primary-key lookups.
DELETE FROM {{schema}}.outbox
WHERE state = 'delivered' AND id = ANY (ARRAY(
    SELECT d.id
    FROM unnest($3::text[]) AS t(type)
    CROSS JOIN LATERAL (
        SELECT o.id, o.delivered_at
        FROM {{schema}}.outbox o
        WHERE o.state = 'delivered' AND o.type = t.type AND o.delivered_at < now() - $1::interval
        ORDER BY o.delivered_at
        LIMIT $2
    ) d
    ORDER BY d.delivered_at
    LIMIT $2));
