-- The attempts of inbox queue row ?1, after inbox_failed.sql counted one:
-- the app decides from it whether to park the row.
SELECT attempts FROM {{p}}inbox_queue WHERE id = ?1;
