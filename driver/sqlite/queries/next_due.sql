-- How long until the earliest pending row of the types in the JSON array
-- ?2 that is not due yet comes due, at ?1 (now): a scheduled row or one
-- waiting for a retry, for the relay's timer (driver.DueReporter). A
-- leased row, whose available_at the claim sets to its lease's end, and a
-- row in doubt are left out. Each type's range of the claim index is read
-- from now on, stopping at its first entry.
SELECT min((SELECT o.available_at FROM {{p}}outbox o
            WHERE o.state = 'pending' AND o.type = t.value AND o.available_at > ?1
              AND typeof(o.available_at) = 'integer' AND o.attempted_at IS NULL
              AND (o.lease_until IS NULL OR o.lease_until <= ?1)
            ORDER BY o.available_at, o.id LIMIT 1))
  FROM json_each(?2) t;
