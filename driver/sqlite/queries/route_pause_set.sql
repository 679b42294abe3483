-- An operator pauses type ?2 of app ?1, by ?3 for ?4. Pausing it again
-- replaces who and why and keeps paused_at, the start of the pause.
-- Returns the recorded pause.
INSERT INTO {{p}}route_pause (type, app, paused_by, reason, paused_at)
VALUES (?2, ?1, ?3, ?4, {{now}})
ON CONFLICT (type) DO UPDATE SET app = excluded.app, paused_by = excluded.paused_by, reason = excluded.reason
RETURNING type, app, paused_by, reason, paused_at;
