-- The recorded route states of app ?1, or ('') of every app, by type.
SELECT type, app, route, state, since, until, failures, coalesce(last_error, ''), updated_at
  FROM {{p}}route_state
 WHERE ?1 = '' OR app = ?1
 ORDER BY type;
