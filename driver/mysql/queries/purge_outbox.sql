-- Deletes at most ? (the last argument) delivered rows of the types
-- {{types}} delivered at or before the one before: those kept for the
-- delivered retention, now past it. Ranges of the outbox_delivered index
-- (state, type, delivered_at). No ORDER BY: everything past the age goes,
-- so which batch goes first does not matter.
DELETE FROM {{p}}outbox
 WHERE state = 'delivered' AND type IN ({{types}}) AND delivered_at <= ?
 LIMIT ?;
