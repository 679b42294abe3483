-- The recorded decisions about rows in doubt, newest first, at most ?
-- of them. The primary key, walked backwards.
SELECT outbox_id, message_id, type, `key`, outcome, resolved_by, reason, resolved_at
  FROM {{p}}resolutions
 ORDER BY id DESC LIMIT ?;
