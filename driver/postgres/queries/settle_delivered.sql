-- Every settle is fenced by the lease: the token must still be ours and the
-- lease unexpired, or another relay may own the row now. $3 keeps the row
-- (marked delivered, for a retention period) instead of deleting it; a
-- delete writes a quarter of the WAL of an update and no index entries.
-- Returns the ids it settled; the rest are sorted by settle_sort.sql.
-- The state test reads `state COLLATE "C" = 'pending'`: the same test
-- (equality of text does not depend on its collation), spelt so that no
-- partial index on state (claim, key, doubt) can serve the statement. With
-- the xmin horizon pinned the statistics price the primary key dear (its
-- count of entries is the table's few live rows) and a partial index
-- cheap, and the DELETE read a whole partial index for five ids, 2 to 13
-- ms a settle (docs/adr/0023-rows-named-by-id-by-primary-key.md,
-- TestRowsNamedByIDAreFoundByThePrimaryKey).
-- $3 chooses the branch through a join with a subquery that is empty for
-- the other one, not a condition beside the others: under row-level
-- security (docs/security.md) the planner keeps a table's own conditions
-- apart from the policies', no longer sees the branch's constant false,
-- and scanned the whole outbox for the branch not taken.
WITH settled AS (
    DELETE FROM {{schema}}.outbox USING (SELECT WHERE NOT $3::bool) deleting
    WHERE id = ANY($1::bigint[]) AND state COLLATE "C" = 'pending' AND lease_token = $2 AND lease_until > now()
    RETURNING id, type
), kept AS (
    UPDATE {{schema}}.outbox
    SET state = 'delivered', delivered_at = now(), lease_token = NULL, lease_until = NULL, last_error = NULL, last_route = NULL
    FROM (SELECT WHERE $3::bool) keeping
    WHERE id = ANY($1::bigint[]) AND state COLLATE "C" = 'pending' AND lease_token = $2 AND lease_until > now()
    RETURNING id, type
), counted AS (
    -- Runs whether or not the final SELECT reads it, as every data-modifying
    -- WITH does. Appended, never updated: a row that every settle updates
    -- slows them all while the xmin horizon is pinned (migration 011).
    INSERT INTO {{schema}}.delivered_counts_log (type, minute, n)
    SELECT type, date_trunc('minute', now()), count(*)
    FROM (SELECT type FROM settled UNION ALL SELECT type FROM kept) s GROUP BY type
)
SELECT id FROM settled UNION ALL SELECT id FROM kept;
