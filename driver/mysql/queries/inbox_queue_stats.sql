-- The queue per consumer, for metrics: pending rows, dead rows, and the
-- age of the oldest pending row (the one stored first). Applied rows, the
-- bulk of the table, are never read: state follows consumer in the index.
SELECT consumer, SUM(pending), SUM(dead), COALESCE(MAX(oldest), 0)
  FROM (SELECT p.consumer, p.n AS pending, 0 AS dead, {{now}} - r.received_at AS oldest
          FROM (SELECT consumer, COUNT(*) AS n, MIN(id) AS first
                  FROM {{p}}inbox_queue WHERE state = 'pending' GROUP BY consumer) p
          JOIN {{p}}inbox_queue r ON r.id = p.first
        UNION ALL
        SELECT consumer, 0, COUNT(*), NULL
          FROM {{p}}inbox_queue WHERE state = 'dead' GROUP BY consumer) s
 GROUP BY consumer
 ORDER BY consumer;
