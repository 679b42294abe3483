-- Records app ? as the owner of one catalog entry (kind, name), with its
-- window (microseconds, NULL for none) and since (now), unless the entry
-- exists: two apps registering one new name at once meet on its key
-- instead of both finding it absent, and the second then reads the first's
-- entry (register_read.sql). One row inserted means it was new. "kind =
-- kind" changes nothing: MySQL's INSERT IGNORE would also hide errors.
INSERT INTO {{p}}owners (kind, name, app, dedup_window_us, since) VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE kind = kind;
