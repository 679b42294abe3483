-- Parks row ?2 as dead with reason ?1; one pending row or none.
UPDATE {{p}}inbox_queue SET state = 'dead', attempts = attempts + 1, last_error = ?
 WHERE id = ? AND state = 'pending';
