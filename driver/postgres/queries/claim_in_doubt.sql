-- Leases up to $2 rows in doubt of the types in $1 to token $3 for $4, for
-- a reconcile probe: marked (attempted_at set), whose lease ended at least
-- $7 ago (a request a dead relay left on the way has arrived by then), and
-- due for a probe (available_at, which settle_in_doubt.sql pushes back
-- after a probe that got no answer). The attempt is not counted: a probe
-- sends nothing that applies an effect. $5/$6 are the fence (app, epoch)
-- as in claim.sql. Reads outbox_doubt_idx, which holds marked rows only.
WITH fence AS (
    SELECT $5::text = '' OR EXISTS (
        SELECT 1 FROM {{schema}}.leader WHERE app = $5::text AND epoch = $6::bigint) AS ok
), due AS (
    SELECT o.id
    FROM fence, {{schema}}.outbox o
    WHERE fence.ok
      AND o.state = 'pending'
      AND o.attempted_at IS NOT NULL
      AND o.type = ANY($1::text[])
      AND (o.lease_until IS NULL OR o.lease_until <= now() - $7::interval)
      AND o.available_at <= now()
    ORDER BY o.id
    LIMIT $2
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {{schema}}.outbox o
SET lease_token = $3,
    lease_until = now() + $4::interval
FROM due
WHERE o.id = due.id
RETURNING o.id, o.message_id, o.type, o.key, o.payload, o.headers, o.attempts, o.created_at, o.available_at, o.attempted_at;
