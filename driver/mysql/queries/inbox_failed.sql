-- Records a failed application: reason ?1, due again after ?2 seconds, row
-- ?3. Like inbox_applied, it changes one pending row or none.
UPDATE {{p}}inbox_queue SET attempts = attempts + 1, last_error = ?, available_at = {{now}} + CAST(? * 1000000 AS SIGNED)
 WHERE id = ? AND state = 'pending';
