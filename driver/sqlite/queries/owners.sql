-- The catalog, of app ?1 or ('') of every app, in kind and name order
-- (SQLite's binary collation is Go's byte order). Windows are
-- microseconds, NULL for none; app is NULL for an unclaimed entry.
SELECT kind, name, app, dedup_window_us, since FROM {{p}}owners
 WHERE ?1 = '' OR app = ?1
 ORDER BY kind, name;
