-- Deletes up to $2 dedup records of the consumers app $1 owns, each older
-- than that consumer's own window. A consumer of another app, one nobody
-- registered, and one registered without a window (NULL) keep theirs: a
-- record purged too early lets a redelivered message apply twice. One seek
-- per consumer on inbox_consumer_received_idx; the records found are
-- deleted by their row address (records are never updated, so it cannot
-- move), which keeps the delete off a join with the whole table.
DELETE FROM {{schema}}.inbox
WHERE ctid = ANY (ARRAY(
    SELECT i.ctid
    FROM {{schema}}.owners c
    CROSS JOIN LATERAL (
        SELECT r.ctid, r.received_at
        FROM {{schema}}.inbox r
        WHERE r.consumer = c.name AND r.received_at < now() - c.dedup_window
        ORDER BY r.received_at
        LIMIT $2
    ) i
    WHERE c.kind = 'consumer' AND c.app = $1::text AND c.dedup_window IS NOT NULL
    ORDER BY i.received_at
    LIMIT $2));
