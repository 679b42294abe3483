-- Stores offset ? (the fourth argument) of consumer ? in partition ? of
-- source ?, at {{now}}, in the transaction of the effects it covers.
INSERT INTO {{p}}offsets (consumer, source, `partition`, `offset`, updated_at) VALUES (?, ?, ?, ?, {{now}})
ON DUPLICATE KEY UPDATE `offset` = VALUES(`offset`), updated_at = VALUES(updated_at);
