-- The operators' pauses of app ? or (the same argument again, '') of
-- every app, by type.
SELECT type, app, paused_by, reason, paused_at FROM {{p}}route_pause
 WHERE ? = '' OR app = ?
 ORDER BY type;
