-- Records as app $4's every resource of ($1 kinds, $2 names, $3 windows in
-- microseconds, 0 for none) the catalog does not have yet. ON CONFLICT waits
-- for a concurrent registration of the same resource to commit or roll back,
-- so of two apps racing for it exactly one inserts it and the other then
-- reads the winner's row. Inserting in key order keeps two registrations of
-- overlapping sets from locking each other in a cycle.
INSERT INTO {{schema}}.owners (kind, name, app, dedup_window)
SELECT r.kind, r.name, $4::text, CASE WHEN r.kind = 'consumer' AND r.window_us > 0 THEN r.window_us * interval '1 microsecond' END
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(kind, name, window_us)
ORDER BY r.kind, r.name
ON CONFLICT (kind, name) DO NOTHING;
