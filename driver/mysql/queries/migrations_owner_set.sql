-- Records app ? as the owner of the migrations entry (kind, name) after
-- its first migration, since {{now}}, unless another app owns it; an
-- unclaimed entry is adopted. The assignments run left to right, so
-- since is tested against the app before it changes.
INSERT INTO {{p}}owners (kind, name, app, since) VALUES (?, ?, ?, {{now}})
ON DUPLICATE KEY UPDATE since = IF(app IS NULL, VALUES(since), since), app = COALESCE(app, VALUES(app));
