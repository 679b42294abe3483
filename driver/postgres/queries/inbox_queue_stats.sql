-- The queue per consumer, for metrics: one pass over the table, which holds
-- the backlog, the dead rows and the applied rows of one window.
SELECT consumer,
       count(*) FILTER (WHERE state = 'pending'),
       count(*) FILTER (WHERE state = 'dead'),
       count(*) FILTER (WHERE state = 'applied'),
       coalesce(extract(epoch FROM now() - min(received_at) FILTER (WHERE state = 'pending')), 0)::float8
FROM {{schema}}.inbox_queue
GROUP BY consumer
ORDER BY consumer;
