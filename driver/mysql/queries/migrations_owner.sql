-- The app that owns the migrations entry (kind, name) of the catalog,
-- NULL or no row for none: only it migrates.
SELECT app FROM {{p}}owners WHERE kind = ? AND name = ?;
