-- Each part reads its own partial index instead of the whole table. The
-- owner comes from the catalog, one primary-key lookup per type ('' for a
-- type no app owns, such as one released while rows of it wait).
-- A row in doubt (marked by an at-most-once attempt, not under a live
-- lease) counts in in_doubt only, with the age of its mark.
-- The ages are of finite times only: now() - 'infinity' is out of range
-- (SQLSTATE 22008), and one such row, stored before migration 012 refused
-- it, made stats and every status and /metrics scrape fail. The relay
-- parks such a row dead ("unreadable row: created_at is infinity").
-- A scheduled row (not due yet, never attempted, no error recorded: a
-- NotBefore in the future) counts in scheduled only, and is not the oldest
-- pending: it is not late. A row waiting for a retry's backoff has its
-- error recorded and stays pending.
WITH p AS (
    SELECT type,
           count(*) FILTER (WHERE attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= now()) AND NOT sched) AS pending,
           count(*) FILTER (WHERE lease_until > now()) AS in_flight,
           count(*) FILTER (WHERE attempted_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= now())) AS in_doubt,
           min(created_at) FILTER (WHERE (attempted_at IS NULL OR lease_until > now()) AND NOT sched AND isfinite(created_at)) AS oldest,
           min(attempted_at) FILTER (WHERE attempted_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= now()) AND isfinite(attempted_at)) AS oldest_doubt,
           count(*) FILTER (WHERE sched) AS scheduled
    FROM (
        SELECT type, created_at, attempted_at, lease_until,
               coalesce(available_at > now() AND attempts = 0 AND last_error IS NULL AND attempted_at IS NULL
                        AND (lease_until IS NULL OR lease_until <= now()), false) AS sched
        FROM {{schema}}.outbox WHERE state = 'pending'
    ) r GROUP BY type
), d AS (
    SELECT type, count(*) AS dead FROM {{schema}}.outbox WHERE state = 'dead' GROUP BY type
), l AS (
    -- The folded counts and the log not yet folded into them (migration 011).
    SELECT type, sum(n)::bigint AS delivered FROM (
        SELECT type, n FROM {{schema}}.delivered_counts WHERE minute > now() - interval '1 hour'
        UNION ALL
        SELECT type, n FROM {{schema}}.delivered_counts_log WHERE minute > now() - interval '1 hour'
    ) c GROUP BY type
), s AS (
    SELECT coalesce(p.type, d.type, l.type) AS type,
           coalesce(p.pending, 0) AS pending, coalesce(p.in_flight, 0) AS in_flight,
           coalesce(d.dead, 0) AS dead, coalesce(l.delivered, 0) AS delivered,
           coalesce(extract(epoch FROM now() - p.oldest), 0)::float8 AS oldest,
           coalesce(p.in_doubt, 0) AS in_doubt,
           coalesce(extract(epoch FROM now() - p.oldest_doubt), 0)::float8 AS oldest_doubt,
           coalesce(p.scheduled, 0) AS scheduled
    FROM p FULL JOIN d ON d.type = p.type FULL JOIN l ON l.type = coalesce(p.type, d.type)
)
SELECT s.type, coalesce(w.app, ''), s.pending, s.in_flight, s.dead, s.delivered, s.oldest, s.in_doubt, s.oldest_doubt, s.scheduled
FROM s LEFT JOIN {{schema}}.owners w ON w.kind = 'type' AND w.name = s.type
ORDER BY 1;
