-- When the earliest pending row of the types {{types}} that is not due
-- yet comes due, and the clock it was read at ({{now}}, one time for the
-- whole statement, so the wait is taken from the same now): a scheduled
-- row or one waiting for a retry. A leased row and a row in doubt
-- (marked) are left out. Each type's range of the outbox_claim index is
-- read from now on. The statement reads the clock itself instead of a
-- round trip of its own.
SELECT MIN(available_at), {{now}} FROM {{p}}outbox
 WHERE state = 'pending' AND type IN ({{types}}) AND available_at > {{now}}
   AND attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= {{now}});
