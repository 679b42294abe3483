-- The outbox per type, for Stats: one row per type from each branch,
-- which the driver adds up. now is each of the first eight arguments
-- (each {{doubt}}, the test of a row in doubt, and {{sched}}, the test of
-- a scheduled row, takes one); the ninth is an hour ago.
-- Only pending and dead rows are read (state leads the outbox_claim
-- index); kept delivered rows may be many, and the deliveries of the last
-- hour come from the per-minute counts, so they include rows deleted at
-- settle. Pending counts rows waiting for a claim (due, or waiting for a
-- retry); scheduled, rows not due yet that were never attempted, in their
-- own column only, and never the oldest pending (they are not late); in
-- flight, rows under a live lease. A row in doubt counts in the in-doubt
-- column only, with the age of its mark.
SELECT type,
       COALESCE(SUM(state = 'pending' AND attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= ?) AND NOT {{sched}}), 0),
       COALESCE(SUM(state = 'pending' AND lease_until > ?), 0),
       COALESCE(SUM(state = 'dead'), 0),
       0,
       MIN(CASE WHEN state = 'pending' AND (attempted_at IS NULL OR lease_until > ?) AND NOT {{sched}} THEN created_at END),
       COALESCE(SUM({{doubt}}), 0),
       MIN(CASE WHEN {{doubt}} THEN attempted_at END),
       COALESCE(SUM({{sched}}), 0)
  FROM {{p}}outbox WHERE state IN ('pending', 'dead') GROUP BY type
UNION ALL
SELECT type, 0, 0, 0, SUM(n), NULL, 0, NULL, 0 FROM {{p}}delivered_counts WHERE minute > ? GROUP BY type;
