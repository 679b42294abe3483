-- Marks the rows ($1) still leased to $2, under a live lease and not marked
-- yet, as attempted on an at-most-once route: from now on the request may
-- reach the receiver, so no claim takes them again (claim.sql) until a
-- definite outcome clears the mark. The driver runs it in a transaction of
-- its own with synchronous_commit on, before anything is sent; only the
-- rows it returns may be sent. The row stays in the claim index, and the
-- update touches the doubt index's column, so it is not a HOT update.
-- The state test's COLLATE "C" keeps every partial index on state out of
-- the plan: the rows are found by the primary key (settle_delivered.sql).
UPDATE {{schema}}.outbox
SET attempted_at = now()
WHERE id = ANY($1::bigint[]) AND state COLLATE "C" = 'pending' AND lease_token = $2 AND lease_until > now()
  AND attempted_at IS NULL
RETURNING id;
