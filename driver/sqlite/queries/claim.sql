-- Leases up to ?5 due rows of the types in the JSON object ?4 (type ->
-- ordered) to token ?2 until ?3; ?1 is now. An ordered type gives only the
-- oldest unsettled row of each key: no pending row of the same (type, key)
-- with a smaller id, whether leased, waiting to retry or due.
-- The types are the outer loop (CROSS JOIN keeps them there) and each is
-- scanned on its own range of the outbox_claim index (type, available_at,
-- id) up to the limit, then the results merged: a backlog of other types,
-- other apps' included, costs nothing. One statement for any number of
-- types, with no compound SELECT to outgrow (SQLite allows 500 terms).
-- available_at moves to the lease's end, so a leased row is not due and
-- the claim needs no lease_until test. A marked row (an at-most-once
-- attempt that may have reached its receiver, mark.sql) is never claimed
-- again. The attempts a plain INSERT of a version before 7 gave a row count
-- from 0 to 1,000,000,000 (one of 2^63-1 turned real on "+ 1").
-- RETURNING gives the job columns ({{jobcols}}, read by unreadable.go).
UPDATE {{p}}outbox
   SET lease_token = ?2, lease_until = ?3, available_at = ?3,
       attempts = CASE WHEN typeof(attempts) = 'integer' THEN min(max(attempts, 0), 1000000000) ELSE 0 END + 1
 WHERE id IN (
    SELECT c.id
      FROM json_each(?4) t CROSS JOIN {{p}}outbox c
     WHERE c.id IN (
        SELECT o.id FROM {{p}}outbox o
         WHERE o.state = 'pending' AND o.type = t.key AND o.available_at <= ?1 AND o.attempted_at IS NULL
           AND (NOT t.value OR NOT EXISTS (
                SELECT 1 FROM {{p}}outbox b
                 WHERE b.type = o.type AND b.key = o.key AND b.state = 'pending' AND b.id < o.id))
         ORDER BY o.available_at, o.id LIMIT ?5)
     ORDER BY c.available_at, c.id LIMIT ?5)
RETURNING {{jobcols}};
