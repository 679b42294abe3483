-- The owning app of every owned type, for the Owner column of Stats (a
-- type without one shows none).
SELECT name, app FROM {{p}}owners WHERE kind = 'type' AND app IS NOT NULL;
