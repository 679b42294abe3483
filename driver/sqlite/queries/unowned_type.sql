-- The first type of the JSON array ?1 that has no entry in the catalog:
-- the outbox trigger's RAISE takes only a literal, so the type an INSERT
-- was refused for is read back from the refused rows, in the same
-- transaction as the refused insert.
SELECT value FROM json_each(?1)
 WHERE value NOT IN (SELECT name FROM {{p}}owners WHERE kind = 'type')
 LIMIT 1;
