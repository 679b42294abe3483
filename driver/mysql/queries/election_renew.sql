-- The holder renews its lease: the lease runs until the first argument,
-- with the health it reports (NULL for none); the epoch stays.
UPDATE {{p}}leader SET expires_at = ?, health = ? WHERE app = ?;
