-- The state of inbox queue row ?1, read when a protocol statement changed
-- no row, to say why (driver.InboxRowError): no row means it is gone.
SELECT state FROM {{p}}inbox_queue WHERE id = ?1;
