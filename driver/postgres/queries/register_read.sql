-- The entries of the resources being registered, read without a lock:
-- sent only when register_lock.sql returned fewer entries than there are
-- resources. Under row-level security (security/row_level_security.sql) a
-- role may lock only its own apps' entries and the unclaimed ones, and
-- FOR UPDATE skips any other silently; an entry of another app must still
-- be seen, as the conflict it is. A statement of its own, so that in READ
-- COMMITTED it sees what committed while the lock waited.
SELECT o.kind, o.name, coalesce(o.app, ''), o.since
FROM {{schema}}.owners o
JOIN unnest($1::text[], $2::text[]) AS r(kind, name) ON o.kind = r.kind AND o.name = r.name
ORDER BY o.kind, o.name;
