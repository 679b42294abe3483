-- Released: the rows of ids {{ids}} (locked by settle_lock.sql) go back
-- untried and due at now (the first argument). The attempt the claim
-- counted is taken back, and an at-most-once mark is cleared: the relay
-- releases only rows it did not send.
UPDATE {{p}}outbox
   SET attempts = GREATEST(attempts - 1, 0), available_at = ?, attempted_at = NULL,
       lease_token = NULL, lease_until = NULL
 WHERE id IN ({{ids}});
