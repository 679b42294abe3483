-- Leases the rows of ids {{ids}} that claim.sql (or claim_ordered.sql,
-- claim_many.sql) locked in the same transaction: to token ? until ?,
-- available_at moved to the lease's end too (the third argument, the
-- same time), so that a leased row is not due. The attempt is counted
-- here. The attempts a plain INSERT gave a row count from 0 to
-- 1,000,000,000, so "+ 1" never overflows. MySQL has no UPDATE …
-- RETURNING: the rows are read back with claimed_rows.sql.
UPDATE {{p}}outbox
   SET lease_token = ?, lease_until = ?, available_at = ?,
       attempts = LEAST(GREATEST(attempts, 0), 1000000000) + 1
 WHERE id IN ({{ids}});
