-- Deletes the rows app $1 recorded for types it no longer routes ($2 lists
-- the ones it does), so a type removed from its Registry shows no state
-- left over from before.
DELETE FROM {{schema}}.route_state WHERE app = $1 AND NOT (type = ANY($2::text[]));
