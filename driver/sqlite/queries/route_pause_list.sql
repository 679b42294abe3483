-- The operators' pauses of app ?1 ('' lists every app's), by type.
SELECT type, app, paused_by, reason, paused_at
FROM {{p}}route_pause
WHERE ?1 = '' OR app = ?1
ORDER BY type;
