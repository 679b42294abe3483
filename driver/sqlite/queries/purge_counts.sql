-- Deletes the per-minute delivered counts of the types in the JSON array
-- ?1 for minutes before ?2 (a day ago): Stats reads the last hour and the
-- console's chart at most a day.
DELETE FROM {{p}}delivered_counts
 WHERE type IN (SELECT value FROM json_each(?1)) AND minute < ?2;
