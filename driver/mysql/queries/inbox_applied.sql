-- Marks claimed row ?1 applied, in the app's transaction. It changes one
-- row or none: none means the row is not pending, and the caller rolls
-- back.
UPDATE {{p}}inbox_queue SET state = 'applied', applied_at = {{now}}
 WHERE id = ? AND state = 'pending';
