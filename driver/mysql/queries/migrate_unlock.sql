-- Releases the migrators' lock (migrate_lock.sql) on its connection.
DO RELEASE_LOCK(CONCAT(DATABASE(), '.', ?));
