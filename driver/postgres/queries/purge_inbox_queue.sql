-- Deletes up to $2 applied inbox queue rows of the consumers app $1 owns,
-- each once received longer ago than that consumer's window: the row goes
-- with its dedup record (purge_inbox.sql), and a consumer of another app,
-- one nobody registered, or one registered without a window keep theirs.
-- Pending and dead rows are never deleted: they wait for the app. One seek
-- per consumer on inbox_queue_applied_idx; the rows found are deleted by
-- id alone (an applied row never changes, and the ones found are locked
-- until the delete). Every replica of a receiver purges: rows another
-- purge holds are skipped, so two never wait on each other or deadlock.
DELETE FROM {{schema}}.inbox_queue
WHERE id = ANY (ARRAY(
    SELECT i.id
    FROM {{schema}}.owners c
    CROSS JOIN LATERAL (
        SELECT r.id, r.received_at
        FROM {{schema}}.inbox_queue r
        WHERE r.consumer = c.name AND r.state = 'applied' AND r.received_at < now() - c.dedup_window
        ORDER BY r.received_at
        LIMIT $2
        FOR UPDATE OF r SKIP LOCKED
    ) i
    WHERE c.kind = 'consumer' AND c.app = $1::text AND c.dedup_window IS NOT NULL
    ORDER BY i.received_at
    LIMIT $2));
