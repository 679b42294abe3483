-- The queue per consumer, for metrics: pending rows and dead rows, each
-- counted on its partial index, and the age of the oldest pending row (the
-- one stored first: ids grow as rows are stored). Applied rows, kept for a
-- whole window and so the bulk of the table, are never read.
SELECT consumer, sum(pending)::bigint, sum(dead)::bigint, coalesce(max(oldest), 0)::float8
FROM (
    SELECT p.consumer, p.n AS pending, 0 AS dead, extract(epoch FROM now() - r.received_at) AS oldest
    FROM (SELECT consumer, count(*) AS n, min(id) AS first
          FROM {{schema}}.inbox_queue WHERE state = 'pending' GROUP BY consumer) p
    JOIN {{schema}}.inbox_queue r ON r.id = p.first
    UNION ALL
    SELECT consumer, 0, count(*), NULL
    FROM {{schema}}.inbox_queue WHERE state = 'dead' GROUP BY consumer
) x
GROUP BY consumer
ORDER BY consumer;
