-- The per-minute delivered counts of the types in the JSON array ?1 for the
-- minutes that began within ?2 microseconds of now, for the console's
-- chart. The type leads the primary key (type, minute), so each type is one
-- range of it; minute is unix microseconds at the minute's start.
SELECT d.type, d.minute, d.n
  FROM {{p}}delivered_counts d
 WHERE d.type IN (SELECT value FROM json_each(?1))
   AND d.minute > {{now}} - ?2
 ORDER BY d.type, d.minute;
