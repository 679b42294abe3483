-- Leases up to $2 due rows of the types in $1 to token $3 for $4.
-- $5 flags which of $1 are ordered (only the oldest unsettled row of each
-- key may go). $6/$7 are the fence (app, epoch); app '' means no fence.
-- One LATERAL scan per type keeps each on the (type, available_at, id)
-- index, whatever the other apps have queued in the same table.
-- $8/$9 are each type's floor, (available_at, id): the scan starts there
-- instead of at the index's oldest entries, which are the entries of rows
-- already delivered. A pinned xmin horizon keeps those entries (a deleted
-- row's entry goes only when no snapshot can see the row), and a walk from
-- the start steps over every one of them on every claim. The driver keeps
-- the floors (floor.go) and sends '-infinity' for a full claim: the
-- periodic sweep that finds rows committed late below a floor.
-- Every row also returns the claim's now(), which the next floor is
-- measured from.
-- A marked row (attempted_at set: an at-most-once attempt that may have
-- reached its receiver, mark.sql) is never claimed again: it is in doubt
-- until a definite outcome, a reconcile probe or an operator clears it.
-- The attempts a plain INSERT gave a row count from 0 to 1,000,000,000:
-- one of 2147483647 made "+ 1" overflow (SQLSTATE 22003) and fail the
-- whole batch on every claim.
WITH fence AS (
    SELECT $6::text = '' OR EXISTS (
        SELECT 1 FROM {{schema}}.leader WHERE app = $6::text AND epoch = $7::bigint) AS ok
), due AS (
    SELECT c.id, c.available_at
    FROM fence, unnest($1::text[], $5::bool[], $8::timestamptz[], $9::bigint[]) AS t(type, ordered, floor_at, floor_id)
    CROSS JOIN LATERAL (
        SELECT o.id, o.available_at
        FROM {{schema}}.outbox o
        WHERE o.state = 'pending'
          AND o.type = t.type
          AND o.available_at <= now()
          AND (o.available_at, o.id) >= (t.floor_at, t.floor_id)
          AND (o.lease_until IS NULL OR o.lease_until <= now())
          AND o.attempted_at IS NULL
          AND (NOT t.ordered OR NOT EXISTS (
                SELECT 1 FROM {{schema}}.outbox p
                WHERE p.state = 'pending' AND p.type = o.type AND p.key = o.key AND p.id < o.id))
        ORDER BY o.available_at, o.id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ) c
    WHERE fence.ok
    ORDER BY c.available_at, c.id
    LIMIT $2
)
UPDATE {{schema}}.outbox o
SET attempts = least(greatest(o.attempts, 0), 1000000000) + 1,
    lease_token = $3,
    lease_until = now() + $4::interval
FROM due
WHERE o.id = due.id
RETURNING o.id, o.message_id, o.type, o.key, o.payload, o.headers, o.attempts, o.created_at, o.available_at, now();
