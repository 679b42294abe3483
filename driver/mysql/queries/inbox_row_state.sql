-- The state of queue row ?, read when an inbox_applied, inbox_failed or
-- inbox_dead changed no row, to say why (not pending, or gone).
SELECT state FROM {{p}}inbox_queue WHERE id = ?;
