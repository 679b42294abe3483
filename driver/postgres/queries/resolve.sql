-- An operator's decision ($2: delivered, retry or dead) on the rows ($1)
-- that are in doubt: pending, marked, and not under a live lease (a row
-- being probed or sent is left alone). $3 is who decided and $4 why; each
-- decision is recorded in resolutions, which outlives the row. $5 keeps a
-- delivered row (marked delivered) instead of deleting it, as Settle's
-- KeepDelivered does; either way it is counted as delivered. A retry
-- makes the row due now with its mark cleared and its attempts kept.
-- The state test's COLLATE "C" keeps every partial index on state out of
-- the plan: the rows are found by the primary key (settle_delivered.sql).
WITH doubt AS (
    SELECT o.id FROM {{schema}}.outbox o
    WHERE o.id = ANY($1::bigint[]) AND o.state COLLATE "C" = 'pending' AND o.attempted_at IS NOT NULL
      AND (o.lease_until IS NULL OR o.lease_until <= now())
    FOR UPDATE
), gone AS (
    DELETE FROM {{schema}}.outbox o USING doubt
    WHERE o.id = doubt.id AND $2::text = 'delivered' AND NOT $5::bool
    RETURNING o.id, o.message_id, o.type, o.key
), kept AS (
    UPDATE {{schema}}.outbox o
    SET state = 'delivered', delivered_at = now(), lease_token = NULL, lease_until = NULL
    FROM doubt
    WHERE o.id = doubt.id AND $2::text = 'delivered' AND $5::bool
    RETURNING o.id, o.message_id, o.type, o.key
), retried AS (
    UPDATE {{schema}}.outbox o
    SET attempted_at = NULL, available_at = now(), lease_token = NULL, lease_until = NULL,
        last_error = 'resolved by ' || $3::text || ': retry (' || $4::text || ')'
    FROM doubt
    WHERE o.id = doubt.id AND $2::text = 'retry'
    RETURNING o.id, o.message_id, o.type, o.key
), parked AS (
    UPDATE {{schema}}.outbox o
    SET state = 'dead', lease_token = NULL, lease_until = NULL,
        last_error = 'resolved by ' || $3::text || ': dead (' || $4::text || ')'
    FROM doubt
    WHERE o.id = doubt.id AND $2::text = 'dead'
    RETURNING o.id, o.message_id, o.type, o.key
), done AS (
    SELECT * FROM gone UNION ALL SELECT * FROM kept UNION ALL SELECT * FROM retried UNION ALL SELECT * FROM parked
), counted AS (
    INSERT INTO {{schema}}.delivered_counts_log (type, minute, n)
    SELECT type, date_trunc('minute', now()), count(*)
    FROM done WHERE $2::text = 'delivered' GROUP BY type
), recorded AS (
    INSERT INTO {{schema}}.resolutions (outbox_id, message_id, type, key, outcome, resolved_by, reason)
    SELECT id, message_id, type, key, $2::text, $3::text, $4::text FROM done
)
SELECT id FROM done;
