-- The recorded route states of app ? or (the same argument again, '') of
-- every app, by type. The table holds one row per type.
SELECT type, app, route, state, since, `until`, failures, COALESCE(last_error, ''), updated_at
  FROM {{p}}route_state
 WHERE ? = '' OR app = ?
 ORDER BY type;
