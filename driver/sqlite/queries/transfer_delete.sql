-- Gives up the catalog entry of kind ?1 and name ?2 (a transfer to no
-- app), checked as transfer_set.sql is. Rows of a type without an entry
-- are relayed by no app, and a plain INSERT of the type is refused.
DELETE FROM {{p}}owners WHERE kind = ?1 AND name = ?2;
