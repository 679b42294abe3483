-- Records one delivery of consumer ? with key ? (message id, payload hash
-- or NULL; received at {{now}}), unless the (consumer, key) exists: one
-- row inserted means it was new. A concurrent twin's INSERT waits on the
-- first one's key lock; when the first commits it finds the key taken
-- (and reads the first record, inbox_first.sql). "consumer = consumer"
-- changes nothing: INSERT IGNORE would also hide errors.
INSERT INTO {{p}}inbox (consumer, `key`, message_id, received_at, payload_hash) VALUES (?, ?, ?, {{now}}, ?)
ON DUPLICATE KEY UPDATE consumer = consumer;
