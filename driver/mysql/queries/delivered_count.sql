-- Adds n rows (third argument) delivered in the minute that starts at the
-- second to type's (first) count, in the settle's (or resolve's)
-- transaction. The driver writes the types in one order, so two settles
-- never take these rows' locks crosswise. VALUES(n) is the row this
-- statement inserted: MySQL 8.0.20 prefers an alias, which MariaDB lacks.
INSERT INTO {{p}}delivered_counts (type, minute, n) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE n = n + VALUES(n);
