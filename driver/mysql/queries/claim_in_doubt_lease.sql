-- Leases the rows in doubt of ids {{ids}} that claim_in_doubt.sql locked
-- in the same transaction to a reconcile probe: token ?, until ?. No
-- attempt is counted and the mark stays: the probe asks the receiver
-- whether the request arrived, it sends nothing.
UPDATE {{p}}outbox SET lease_token = ?, lease_until = ? WHERE id IN ({{ids}});
