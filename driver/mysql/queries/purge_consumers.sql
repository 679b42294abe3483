-- The consumers app ? owns that have a window (microseconds): the ones
-- whose dedup records and applied queue rows its purge deletes. A
-- consumer without a window, another app's, or one nobody registered
-- keeps every record.
SELECT name, dedup_window_us FROM {{p}}owners
 WHERE app = ? AND kind = 'consumer' AND dedup_window_us IS NOT NULL
 ORDER BY name;
