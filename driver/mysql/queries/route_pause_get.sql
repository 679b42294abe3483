-- The pause of type ?, read back in the transaction of route_pause_set.sql
-- (MySQL has no INSERT … RETURNING).
SELECT type, app, paused_by, reason, paused_at FROM {{p}}route_pause WHERE type = ?;
