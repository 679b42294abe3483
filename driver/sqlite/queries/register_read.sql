-- The catalog entry of kind ?1 and name ?2, if any: its app (NULL when
-- unclaimed), window (microseconds, NULL for none) and since. Read inside
-- Register's immediate transaction (or the caller's, RegisterTx), which
-- holds SQLite's write lock, so no other registration comes in between.
SELECT app, dedup_window_us, since FROM {{p}}owners WHERE kind = ?1 AND name = ?2;
