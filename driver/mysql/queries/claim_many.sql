-- The claim of more types than the driver scans one by one (perTypeLimit,
-- in relay.go): one statement for all of them, the types {{types}} whose
-- routes are not ordered and the ordered ones {{ordered}}, of which only
-- the head of each key (as claim_ordered.sql, on the index it forces).
-- Arguments: now, the types, the ordered types, the limit. The IN lists
-- are ranges of the outbox_claim index, but the order is then a sort of
-- what they hold: the price of a claim of many types at once. Locked as
-- claim.sql.
SELECT o.id, o.available_at FROM {{p}}outbox o
 WHERE o.state = 'pending' AND o.available_at <= ? AND o.attempted_at IS NULL
   AND (o.type IN ({{types}})
        OR (o.type IN ({{ordered}})
            AND NOT EXISTS (SELECT 1 FROM {{p}}outbox b FORCE INDEX ({{p}}outbox_key) WHERE b.type = o.type AND b.`key` = o.`key` AND b.state = 'pending' AND b.id < o.id)))
 ORDER BY o.available_at, o.id LIMIT ?
   FOR UPDATE SKIP LOCKED;
