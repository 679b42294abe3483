-- Whether the version table ? exists in the connection's database (1) or
-- not (0): a database never migrated has none.
SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?;
