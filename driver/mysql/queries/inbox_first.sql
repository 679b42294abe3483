-- The first record of (consumer, key), which inbox_record.sql found taken:
-- its message id and payload hash, read with a locking read, which sees
-- the committed row.
SELECT message_id, payload_hash FROM {{p}}inbox WHERE consumer = ? AND `key` = ? LOCK IN SHARE MODE;
