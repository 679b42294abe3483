-- Records the state of one route, of type ?1, replacing what an earlier
-- write (of any relay of the app) recorded for the type. ?6 (until) and ?8
-- (last error) are NULL for none; ?9 is the database's now.
INSERT INTO {{p}}route_state (type, app, route, state, since, until, failures, last_error, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (type) DO UPDATE
SET app = excluded.app, route = excluded.route, state = excluded.state, since = excluded.since,
    until = excluded.until, failures = excluded.failures, last_error = excluded.last_error, updated_at = excluded.updated_at;
