-- The catalog entries of app ?, as owners.sql: a range of the owners_app
-- index (app, kind). A statement of its own rather than "? = '' OR app =
-- ?", which no index serves.
SELECT kind, name, app, dedup_window_us, since FROM {{p}}owners
 WHERE app = ?
 ORDER BY kind, name;
