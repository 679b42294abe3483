-- The operators' pauses of app $1 ('' lists every app's), by type. The
-- relay reads its app's on every ownership watch; the table holds one row
-- per paused type, so a scan is the plan.
SELECT type, app, paused_by, reason, paused_at
FROM {{schema}}.route_pause
WHERE $1::text = '' OR app = $1::text
ORDER BY type;
