-- Locks the entries of the resources being registered, in key order, and
-- reads their owners: an entry another app owns is a conflict, and nothing
-- may move it until this registration ends.
SELECT o.kind, o.name, coalesce(o.app, ''), o.since
FROM {{schema}}.owners o
JOIN unnest($1::text[], $2::text[]) AS r(kind, name) ON o.kind = r.kind AND o.name = r.name
ORDER BY o.kind, o.name
FOR UPDATE OF o;
