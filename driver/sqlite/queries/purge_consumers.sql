-- The consumers app ?1 owns that have a dedup window (microseconds): the
-- ones whose inbox records and applied queue rows its purge deletes. A
-- consumer without a window keeps its records forever.
SELECT name, dedup_window_us FROM {{p}}owners
 WHERE app = ?1 AND kind = 'consumer' AND dedup_window_us IS NOT NULL
 ORDER BY name;
