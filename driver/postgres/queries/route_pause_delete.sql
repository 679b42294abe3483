-- An operator resumes type $1: its pause is deleted and returned (no row
-- when it was not paused).
DELETE FROM {{schema}}.route_pause
WHERE type = $1::text
RETURNING type, app, paused_by, reason, paused_at;
