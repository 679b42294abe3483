-- The pause of type ? a resume deletes (route_pause_delete.sql), locked
-- until it commits, so that it returns the pause it ended.
SELECT type, app, paused_by, reason, paused_at FROM {{p}}route_pause WHERE type = ? FOR UPDATE;
