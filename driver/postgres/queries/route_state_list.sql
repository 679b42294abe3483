-- The recorded route states of app $1 ('' lists every app's), by type.
SELECT type, app, route, state, since, until, failures, coalesce(last_error, ''), updated_at
FROM {{schema}}.route_state
WHERE $1::text = '' OR app = $1::text
ORDER BY type;
