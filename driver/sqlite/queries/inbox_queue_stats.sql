-- The queue per consumer, for metrics, in one pass over the table.
SELECT consumer,
       sum(state = 'pending'), sum(state = 'dead'), sum(state = 'applied'),
       coalesce({{now}} - min(CASE WHEN state = 'pending' THEN received_at END), 0)
  FROM {{p}}inbox_queue
 GROUP BY consumer
 ORDER BY consumer;
