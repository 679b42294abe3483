-- Records an operator's pause of one type: type, app, who, why, when
-- (now). Pausing it again replaces who and why and keeps paused_at.
INSERT INTO {{p}}route_pause (type, app, paused_by, reason, paused_at) VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE app = VALUES(app), paused_by = VALUES(paused_by), reason = VALUES(reason);
