-- The due rows at now (first argument) of one type (second), oldest
-- first, at most the third argument of them: pending, available_at
-- reached, not marked by an at-most-once attempt (mark.sql). The claim
-- runs it once per type, each on its own range of the outbox_claim index
-- (state, type, available_at, id), which also gives the order, so LIMIT
-- stops the walk and a backlog of other types costs nothing; the driver
-- merges the types' rows by (available_at, id) and keeps the oldest.
-- available_at moves to the lease's end at the claim (claim_lease.sql),
-- so a leased row is not due and no lease_until test is needed.
-- FOR UPDATE SKIP LOCKED (MariaDB 10.6+, MySQL 8.0+): concurrent claimers
-- take different rows; at READ COMMITTED it locks only the rows returned.
SELECT o.id, o.available_at FROM {{p}}outbox o
 WHERE o.state = 'pending' AND o.available_at <= ? AND o.attempted_at IS NULL AND o.type = ?
 ORDER BY o.available_at, o.id LIMIT ?
   FOR UPDATE SKIP LOCKED;
