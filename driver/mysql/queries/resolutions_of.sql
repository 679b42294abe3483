-- The recorded decisions about the messages of ids {{ids}} (UUID text),
-- newest first, at most ? of them: lookups of the resolutions_message
-- index.
SELECT outbox_id, message_id, type, `key`, outcome, resolved_by, reason, resolved_at
  FROM {{p}}resolutions
 WHERE message_id IN ({{ids}})
 ORDER BY id DESC LIMIT ?;
