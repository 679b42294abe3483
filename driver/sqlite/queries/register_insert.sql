-- A new catalog entry: kind ?1, name ?2 owned by app ?3 with window ?4
-- (microseconds, NULL for none), since ?5.
INSERT INTO {{p}}owners (kind, name, app, dedup_window_us, since) VALUES (?1, ?2, ?3, ?4, ?5);
