-- Adds ?3 rows of type ?1 delivered in the minute starting at ?2 (unix
-- microseconds) to the per-minute counts that Stats and the console's
-- chart read (delivered_minutes.sql), since a delivered row is deleted at
-- settle. Run by Settle and by an operator's "delivered" resolution.
INSERT INTO {{p}}delivered_counts (type, minute, n) VALUES (?1, ?2, ?3)
ON CONFLICT (type, minute) DO UPDATE SET n = n + excluded.n;
