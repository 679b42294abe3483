-- claim.sql for a type whose routes are ordered by key: of each key only
-- the oldest unsettled row, the one no pending row of the same (type,
-- key) with a smaller id precedes, whether that one is leased, waiting to
-- retry or due. The outer rows walk the outbox_claim index as in
-- claim.sql; the test of the head is one probe of the outbox_key index
-- (type, key, state, id) per candidate, forced: before InnoDB has
-- recalculated the statistics of an outbox that grew fast, MariaDB was
-- seen to test the head on outbox_delivered (state, type, delivered_at),
-- which reads every pending row of the type for each candidate
-- (explain_test.go). The subquery is a plain read: FOR UPDATE locks the
-- outer rows only.
SELECT o.id, o.available_at FROM {{p}}outbox o
 WHERE o.state = 'pending' AND o.available_at <= ? AND o.attempted_at IS NULL AND o.type = ?
   AND NOT EXISTS (SELECT 1 FROM {{p}}outbox b FORCE INDEX ({{p}}outbox_key) WHERE b.type = o.type AND b.`key` = o.`key` AND b.state = 'pending' AND b.id < o.id)
 ORDER BY o.available_at, o.id LIMIT ?
   FOR UPDATE SKIP LOCKED;
