-- Deletes the delivered rows of the JSON array ?1 still leased to token ?2
-- under a live lease (?3 is now): a row whose lease ran out or went to
-- another relay is not this relay's to settle, and is sorted by
-- settle_sort.sql instead. Returns id and type; the driver counts the
-- types into delivered_counts (delivered_count.sql), so that Stats knows
-- the recent deliveries without the rows.
DELETE FROM {{p}}outbox
 WHERE id IN (SELECT value FROM json_each(?1))
   AND state = 'pending' AND lease_token = ?2 AND lease_until > ?3
RETURNING id, type;
