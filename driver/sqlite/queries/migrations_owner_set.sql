-- Records app ?3 as the owner of the schema's migrations (kind ?1, name
-- ?2) since ?4, when no app owns them: an entry left unclaimed (app NULL)
-- is taken like an absent one, and another app's is left as it is.
INSERT INTO {{p}}owners (kind, name, app, since) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (kind, name) DO UPDATE SET app = excluded.app, since = excluded.since WHERE app IS NULL;
