-- Deletes app ?1's route states of types not in the JSON array ?2: the
-- routes the relay no longer has, when it writes its whole set.
DELETE FROM {{p}}route_state WHERE app = ?1 AND type NOT IN (SELECT value FROM json_each(?2));
