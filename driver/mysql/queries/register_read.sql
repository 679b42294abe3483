-- The entry (kind, name) that register_insert.sql found present: its app
-- (NULL for unclaimed), window and since, locked until the registration
-- commits.
SELECT app, dedup_window_us, since FROM {{p}}owners WHERE kind = ? AND name = ? FOR UPDATE;
