-- The app's lease row as it stands, and whether its lease is live at
-- {{now}}: a lease run out names its last holder as lapsed.
SELECT holder, epoch, since, expires_at, expires_at > {{now}}, health FROM {{p}}leader WHERE app = ?;
