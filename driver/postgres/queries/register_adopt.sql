-- Gives app $4 the entries the upgrade left unclaimed, and takes the window
-- its consumers have now (a redeploy may change it). Runs only once no entry
-- is another app's.
UPDATE {{schema}}.owners o
SET app = $4::text,
    since = CASE WHEN o.app IS NULL THEN now() ELSE o.since END,
    dedup_window = CASE WHEN o.kind = 'consumer' AND r.window_us > 0 THEN r.window_us * interval '1 microsecond' END
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(kind, name, window_us)
WHERE o.kind = r.kind AND o.name = r.name
  AND (o.app IS NULL
       OR (o.app = $4::text AND o.kind = 'consumer'
           AND o.dedup_window IS DISTINCT FROM CASE WHEN r.window_us > 0 THEN r.window_us * interval '1 microsecond' END));
