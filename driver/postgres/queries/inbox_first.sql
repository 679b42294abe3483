-- The record that applied the effect first, when inbox_record.sql stored
-- none: no row means the message was refused as stale instead.
SELECT message_id, payload_hash FROM {{schema}}.inbox WHERE consumer = $1 AND key = $2;
