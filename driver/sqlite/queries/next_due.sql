-- How long until the earliest pending row of the types in the JSON array
-- ?1 that is not due yet comes due, and the clock it was read at
-- ({{now}}): a scheduled row or one waiting for a retry, for the relay's
-- timer (driver.DueReporter). A leased row, whose available_at the claim
-- sets to its lease's end, and a row in doubt are left out. Each type's
-- range of the claim index is read from now on, stopping at its first
-- entry. The statement reads the clock itself instead of a read of its
-- own: its one row is computed in one step, within which SQLite keeps
-- julianday('now') one time, so every {{now}} here is the same.
SELECT min((SELECT o.available_at FROM {{p}}outbox o
            WHERE o.state = 'pending' AND o.type = t.value AND o.available_at > {{now}}
              AND typeof(o.available_at) = 'integer' AND o.attempted_at IS NULL
              AND (o.lease_until IS NULL OR o.lease_until <= {{now}})
            ORDER BY o.available_at, o.id LIMIT 1)),
       {{now}}
  FROM json_each(?1) t;
