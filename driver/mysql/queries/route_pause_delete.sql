-- An operator's resume of type ?: its pause goes.
DELETE FROM {{p}}route_pause WHERE type = ?;
