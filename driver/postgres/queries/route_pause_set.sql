-- An operator pauses type $2 of app $1, by $3 for $4. Pausing it again
-- replaces who and why (the latest word is what the operator means) and
-- keeps paused_at, the start of the pause. Returns the recorded pause.
INSERT INTO {{schema}}.route_pause (type, app, paused_by, reason)
VALUES ($2::text, $1::text, $3::text, $4::text)
ON CONFLICT (type) DO UPDATE SET app = excluded.app, paused_by = excluded.paused_by, reason = excluded.reason
RETURNING type, app, paused_by, reason, paused_at;
