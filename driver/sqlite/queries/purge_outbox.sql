-- Deletes up to ?3 delivered rows of the types in the JSON array ?1
-- delivered at ?2 or before. No ORDER BY: everything past the age goes, so
-- which batch goes first does not matter, and without it one probe of the
-- outbox_delivered index (type, delivered_at) per type stops at the limit.
DELETE FROM {{p}}outbox
 WHERE id IN (SELECT id FROM {{p}}outbox
               WHERE state = 'delivered' AND type IN (SELECT value FROM json_each(?1)) AND delivered_at <= ?2
               LIMIT ?3);
