-- The per-minute delivered counts of the types listed ({{types}}, one
-- placeholder each) for the minutes that began within the last argument's
-- microseconds of now, for the console's chart.
SELECT d.type, d.minute, d.n
  FROM {{p}}delivered_counts d
 WHERE d.type IN ({{types}})
   AND d.minute > {{now}} - ?
 ORDER BY d.type, d.minute;
