-- The outbox per type, for Stats: one row per type from each branch,
-- which the driver adds up, each ending with the clock it was read at
-- ({{now}}, one time for the whole statement), which the ages are taken
-- at: the statement reads the clock itself instead of a round trip of its
-- own. The deliveries of the last hour are the minutes after an hour ago.
-- Only pending and dead rows are read (state leads the outbox_claim
-- index); kept delivered rows may be many, and the deliveries of the last
-- hour come from the per-minute counts, so they include rows deleted at
-- settle. Pending counts rows waiting for a claim (due, or waiting for a
-- retry); scheduled ({{sched_now}}), rows not due yet that were never
-- attempted, in their own column only, and never the oldest pending (they
-- are not late); in flight, rows under a live lease. A row in doubt
-- ({{doubt_now}}) counts in the in-doubt column only, with the age of its
-- mark.
SELECT type,
       COALESCE(SUM(state = 'pending' AND attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= {{now}}) AND NOT {{sched_now}}), 0),
       COALESCE(SUM(state = 'pending' AND lease_until > {{now}}), 0),
       COALESCE(SUM(state = 'dead'), 0),
       0,
       MIN(CASE WHEN state = 'pending' AND (attempted_at IS NULL OR lease_until > {{now}}) AND NOT {{sched_now}} THEN created_at END),
       COALESCE(SUM({{doubt_now}}), 0),
       MIN(CASE WHEN {{doubt_now}} THEN attempted_at END),
       COALESCE(SUM({{sched_now}}), 0),
       {{now}}
  FROM {{p}}outbox WHERE state IN ('pending', 'dead') GROUP BY type
UNION ALL
SELECT type, 0, 0, 0, SUM(n), NULL, 0, NULL, 0, {{now}} FROM {{p}}delivered_counts WHERE minute > {{now}} - 3600000000 GROUP BY type;
