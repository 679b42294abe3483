-- The per-minute counts behind "delivered in the last hour" of the app's
-- types ($1): the log the settles appended to since the last run is
-- folded in, one upsert per type and minute, and the counts are kept a
-- day. Only the active relay runs this, once per purge interval, so the
-- upserted rows are updated once per interval instead of once per settle
-- (migration 011). A settle committing while this runs is folded next time:
-- the DELETE takes only the log rows committed when it began.
WITH expired AS (
    DELETE FROM {{schema}}.delivered_counts WHERE type = ANY($1::text[]) AND minute < now() - interval '1 day'
), moved AS (
    DELETE FROM {{schema}}.delivered_counts_log WHERE type = ANY($1::text[])
    RETURNING type, minute, n
)
INSERT INTO {{schema}}.delivered_counts AS c (type, minute, n)
SELECT type, minute, sum(n) FROM moved WHERE minute >= now() - interval '1 day' GROUP BY type, minute
ON CONFLICT (type, minute) DO UPDATE SET n = c.n + excluded.n;
