-- When the earliest pending row of the types {{types}} that is not due
-- yet at now (the next two arguments) comes due: a scheduled row or one
-- waiting for a retry. A leased row and a row in doubt (marked) are left
-- out. Each type's range of the outbox_claim index is read from now on.
SELECT MIN(available_at) FROM {{p}}outbox
 WHERE state = 'pending' AND type IN ({{types}}) AND available_at > ?
   AND attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= ?);
