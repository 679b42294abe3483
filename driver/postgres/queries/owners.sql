-- The catalog, of app $1 or ('') of every app. Windows come back as
-- microseconds, whatever unit an operator wrote them in.
SELECT kind, name, coalesce(app, ''), coalesce((extract(epoch FROM dedup_window) * 1000000)::bigint, 0), since
FROM {{schema}}.owners
WHERE $1::text = '' OR app = $1::text
ORDER BY kind, name;
