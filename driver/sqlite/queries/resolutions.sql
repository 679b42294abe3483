-- The recorded decisions about messages in doubt, newest first, at most
-- ?1. resolutions_of.sql is the same for given message ids.
SELECT outbox_id, message_id, type, key, outcome, resolved_by, reason, resolved_at
  FROM {{p}}resolutions
 ORDER BY id DESC LIMIT ?1;
