-- An unclaimed entry (app NULL: its owner released it) adopted by the
-- first app to register it: app ?1, window ?2, since ?3, of kind ?4 and
-- name ?5.
UPDATE {{p}}owners SET app = ?1, dedup_window_us = ?2, since = ?3 WHERE kind = ?4 AND name = ?5;
