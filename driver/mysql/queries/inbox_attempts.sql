-- The attempts of queue row ?, read after inbox_failed.sql counted one,
-- in the same transaction.
SELECT attempts FROM {{p}}inbox_queue WHERE id = ?;
