-- Whether the version table ?1 ({{p}}migrations) exists: a database no
-- migration touched has none, and is at version 0.
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1;
