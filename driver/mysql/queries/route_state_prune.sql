-- Deletes app ?'s route states of types not in {{types}}, the ones its
-- relay still routes, when it writes its whole set: a type removed from
-- its Registry shows no state left over. Spelled "IN (…) IS NOT TRUE",
-- not "NOT IN (…)": a relay that routes no type lists none, filled in as
-- NULL, and "type NOT IN (NULL)" is NULL, which would delete nothing;
-- "type IN (NULL) IS NOT TRUE" is true of every row, so such a replace
-- clears the app's rows.
DELETE FROM {{p}}route_state WHERE app = ? AND (type IN ({{types}})) IS NOT TRUE;
