-- Left in doubt: the rows {{ids}} (locked by settle_lock.sql) give their
-- lease up and keep their at-most-once mark (set at now, the first
-- argument, when they had none). Each row's own values come as CASE lists
-- of (id, value) pairs ({{cases}}, one pair a row): when a probe may take
-- it (now plus ProbeAfter), its error and route, as settle_dead.sql.
UPDATE {{p}}outbox
   SET attempted_at = COALESCE(attempted_at, ?),
       available_at = CASE id {{cases}} END,
       last_error = CASE id {{cases}} END,
       last_route = NULLIF(CASE id {{cases}} END, ''),
       lease_token = NULL, lease_until = NULL
 WHERE id IN ({{ids}});
