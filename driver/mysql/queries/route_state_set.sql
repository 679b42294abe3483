-- Records the route state of one type (one row per type): type, app,
-- route, state, since, until (NULL for none), failures, last error (NULL
-- for none), updated_at (now). VALUES(col) is the row this statement
-- inserted: MySQL 8.0.20 prefers an alias, which MariaDB lacks.
INSERT INTO {{p}}route_state (type, app, route, state, since, `until`, failures, last_error, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE app = VALUES(app), route = VALUES(route), state = VALUES(state), since = VALUES(since),
  `until` = VALUES(`until`), failures = VALUES(failures), last_error = VALUES(last_error), updated_at = VALUES(updated_at);
