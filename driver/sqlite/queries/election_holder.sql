-- App ?1's lease row, and whether its lease still runs on the database
-- clock. An expired lease has no holder, but its epoch is still the last
-- one granted.
SELECT holder, epoch, since, expires_at, expires_at > {{now}} FROM {{p}}leader WHERE app = ?1;
