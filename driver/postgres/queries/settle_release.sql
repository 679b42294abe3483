-- Gives rows back untried: the attempt the claim counted is taken back,
-- and an at-most-once mark is cleared (the relay releases only rows it
-- did not send).
-- The state test's COLLATE "C" keeps every partial index on state out of
-- the plan: the rows are found by the primary key (settle_delivered.sql).
UPDATE {{schema}}.outbox
SET lease_token = NULL, lease_until = NULL, attempted_at = NULL, attempts = greatest(attempts - 1, 0)
WHERE id = ANY($1::bigint[]) AND state COLLATE "C" = 'pending' AND lease_token = $2 AND lease_until > now()
RETURNING id;
