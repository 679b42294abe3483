-- The per-minute delivered counts of the types in $1 for the minutes that
-- began within $2 of now(), for the console's chart. One range scan of
-- the primary key (type, minute) per type: the table keeps a day of every
-- type's minutes (purge_counts.sql), and a filter on minute alone reads all
-- of it. OFFSET 0 keeps the LATERAL subquery a subquery: flattened into a
-- join, the planner hashes the whole table instead (a day of 50 types is
-- 72,000 rows; docs/benchmarks.md has both plans). The log of settles not
-- yet folded in (migration 011) holds about one purge interval and has no
-- index: it is read once, for every type together.
WITH folded AS (
    SELECT t.type, c.minute, c.n
    FROM unnest($1::text[]) AS t(type)
    CROSS JOIN LATERAL (
        SELECT d.minute, d.n FROM {{schema}}.delivered_counts d
        WHERE d.type = t.type AND d.minute > now() - $2::interval
        OFFSET 0
    ) c
), recent AS (
    SELECT l.type, l.minute, l.n FROM {{schema}}.delivered_counts_log l
    WHERE l.type = ANY($1::text[]) AND l.minute > now() - $2::interval
)
SELECT type, minute, sum(n)::bigint
FROM (SELECT * FROM folded UNION ALL SELECT * FROM recent) c
GROUP BY 1, 2
ORDER BY 1, 2;
