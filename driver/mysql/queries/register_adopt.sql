-- An unclaimed entry (kind, name; the last two arguments) is adopted by
-- the first app that registers it: app, window and since (now).
UPDATE {{p}}owners SET app = ?, dedup_window_us = ?, since = ? WHERE kind = ? AND name = ?;
