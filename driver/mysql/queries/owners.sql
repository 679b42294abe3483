-- The whole catalog, in kind and name order (the names are VARBINARY, so
-- the order is Go's byte order). Windows are microseconds, NULL for none;
-- app is NULL for an unclaimed entry.
SELECT kind, name, app, dedup_window_us, since FROM {{p}}owners
 ORDER BY kind, name;
