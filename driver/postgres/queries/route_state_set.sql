-- Records the state of routes, one row per type ($1..$8 are arrays of the
-- same length), replacing what an earlier write (of any relay of the app)
-- recorded for those types.
INSERT INTO {{schema}}.route_state AS s (type, app, route, state, since, until, failures, last_error, updated_at)
SELECT t.type, t.app, t.route, t.state, t.since, t.until, t.failures, nullif(t.last_error, ''), now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::int[], $8::text[])
    AS t(type, app, route, state, since, until, failures, last_error)
ON CONFLICT (type) DO UPDATE
SET app = excluded.app, route = excluded.route, state = excluded.state, since = excluded.since,
    until = excluded.until, failures = excluded.failures, last_error = excluded.last_error, updated_at = now();
