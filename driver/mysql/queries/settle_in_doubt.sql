-- Left in doubt: the row {{ids}} (locked by settle_lock.sql) gives its
-- lease up and keeps its at-most-once mark (set at now, the first
-- argument, when it had none); a probe may take it at the second (now
-- plus ProbeAfter). Error and route as settle_dead.sql.
UPDATE {{p}}outbox
   SET attempted_at = COALESCE(attempted_at, ?), available_at = ?, last_error = ?,
       last_route = NULLIF(?, ''), lease_token = NULL, lease_until = NULL
 WHERE id IN ({{ids}});
