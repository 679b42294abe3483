-- The queue per consumer, for metrics: pending rows and dead rows, each
-- counted on its partial index, and the age of the oldest pending row (the
-- one stored first). Applied rows, kept for a whole window and so the bulk
-- of the table, are never read.
SELECT consumer, sum(pending), sum(dead), coalesce(max(oldest), 0)
  FROM (SELECT p.consumer, p.n AS pending, 0 AS dead, {{now}} - r.received_at AS oldest
          FROM (SELECT consumer, count(*) AS n, min(id) AS first
                  FROM {{p}}inbox_queue WHERE state = 'pending' GROUP BY consumer) p
          JOIN {{p}}inbox_queue r ON r.id = p.first
        UNION ALL
        SELECT consumer, 0, count(*), NULL
          FROM {{p}}inbox_queue WHERE state = 'dead' GROUP BY consumer)
 GROUP BY consumer
 ORDER BY consumer;
