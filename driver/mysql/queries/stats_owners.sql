-- The owner app of every claimed type, for Stats (an unclaimed type, app
-- NULL, shows no owner). The catalog is small.
SELECT name, app FROM {{p}}owners WHERE kind = 'type' AND app IS NOT NULL;
