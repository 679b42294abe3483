-- The outbox per type at ?1 (now), for Stats: one row per type from each
-- branch, which the driver adds up, each ending with ?1, the time the ages
-- are taken at. now is an argument, not the clock read in the statement
-- as next_due.sql does: SQLite keeps julianday('now') one time only within
-- one step of a statement, and the groups of this one may come out in
-- several. Only pending and dead rows are read,
-- through their partial indexes; kept delivered rows may be many, and the
-- deliveries of the last hour (minutes after ?2) come from the per-minute
-- counts, so they include rows deleted at settle.
-- Pending counts rows waiting for a claim (due, or waiting for a retry);
-- scheduled ({{sched}}), rows not due yet that were never attempted, in
-- their own column only, and never the oldest pending (they are not
-- late); in flight, rows under a live lease. A row in doubt ({{doubt}}) counts in the in-doubt
-- column only, with the age of its mark. Only integer times give an age:
-- a row holding anything else is unreadable, and the relay parks it.
SELECT type,
       coalesce(sum(state = 'pending' AND attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= ?1) AND NOT {{sched}}), 0),
       coalesce(sum(state = 'pending' AND lease_until > ?1), 0),
       coalesce(sum(state = 'dead'), 0),
       0,
       min(CASE WHEN state = 'pending' AND (attempted_at IS NULL OR lease_until > ?1) AND NOT {{sched}} AND typeof(created_at) = 'integer' THEN created_at END),
       coalesce(sum({{doubt}}), 0),
       min(CASE WHEN {{doubt}} AND typeof(attempted_at) = 'integer' THEN attempted_at END),
       coalesce(sum({{sched}}), 0),
       ?1
  FROM {{p}}outbox WHERE state IN ('pending', 'dead') GROUP BY type
UNION ALL
SELECT type, 0, 0, 0, sum(n), NULL, 0, NULL, 0, ?1 FROM {{p}}delivered_counts WHERE minute > ?2 GROUP BY type;
