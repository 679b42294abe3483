-- Gives the entry (kind, name; the last two arguments) that
-- transfer_lock.sql locked to app ?, owned since ? (now).
UPDATE {{p}}owners SET app = ?, since = ? WHERE kind = ? AND name = ?;
