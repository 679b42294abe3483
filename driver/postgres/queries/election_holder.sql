-- The election row of app $1 as 'mensageria status' and /metrics show
-- it: who holds it ('' when released), its epoch, since when, when its
-- lease runs out, whether it still runs, and what the holder last said
-- of its health.
SELECT holder, epoch, since, expires_at, expires_at > now() AS live, health
FROM {{schema}}.leader
WHERE app = $1;
