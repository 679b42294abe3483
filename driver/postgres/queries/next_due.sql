-- How long, in seconds on the database clock, until the earliest pending
-- row of the types in $1 that is not due yet becomes due: a scheduled row
-- (a NotBefore in the future) or one waiting for a retry's backoff. A row
-- under a live lease or in doubt is left out: no claim takes it when its
-- available_at passes. NULL when there is none. Each type's range of the
-- claim index is read from now() on and stops at its first entry, so the
-- entries of rows delivered since the last vacuum, all before now(), are
-- never walked (ADR 0019).
SELECT extract(epoch FROM min(n.available_at) - now())::float8
FROM unnest($1::text[]) AS t(type)
CROSS JOIN LATERAL (
    SELECT o.available_at
    FROM {{schema}}.outbox o
    WHERE o.state = 'pending'
      AND o.type = t.type
      AND o.available_at > now()
      AND o.attempted_at IS NULL
      AND (o.lease_until IS NULL OR o.lease_until <= now())
    ORDER BY o.available_at, o.id
    LIMIT 1
) n;
