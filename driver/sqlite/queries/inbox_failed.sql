-- Records a failed application: reason ?1, due again after ?2 seconds, row
-- ?3 (the order an app reads them in docs/config.md). Like inbox_applied,
-- it changes one pending row or none.
UPDATE {{p}}inbox_queue SET attempts = attempts + 1, last_error = ?, available_at = {{now}} + ? * 1000000
 WHERE id = ? AND state = 'pending';
