-- The app that owns the schema's migrations (kind ?1, name ?2), NULL or
-- no row when none is recorded.
SELECT app FROM {{p}}owners WHERE kind = ?1 AND name = ?2;
