-- Each part reads its own partial index instead of the whole table.
WITH p AS (
    SELECT type,
           count(*) FILTER (WHERE lease_until IS NULL OR lease_until <= now()) AS pending,
           count(*) FILTER (WHERE lease_until > now()) AS in_flight,
           min(created_at) AS oldest
    FROM {{schema}}.outbox WHERE state = 'pending' GROUP BY type
), d AS (
    SELECT type, count(*) AS dead FROM {{schema}}.outbox WHERE state = 'dead' GROUP BY type
), l AS (
    SELECT type, sum(n)::bigint AS delivered FROM {{schema}}.delivered_counts
    WHERE minute > now() - interval '1 hour' GROUP BY type
)
SELECT coalesce(p.type, d.type, l.type) AS type,
       coalesce(p.pending, 0), coalesce(p.in_flight, 0), coalesce(d.dead, 0), coalesce(l.delivered, 0),
       coalesce(extract(epoch FROM now() - p.oldest), 0)::float8
FROM p FULL JOIN d ON d.type = p.type FULL JOIN l ON l.type = coalesce(p.type, d.type)
ORDER BY 1;
