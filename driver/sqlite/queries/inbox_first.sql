-- The record that applied the effect first, when inbox_record.sql stored
-- none: its message id and payload digest.
SELECT message_id, payload_hash FROM {{p}}inbox WHERE consumer = ?1 AND key = ?2;
