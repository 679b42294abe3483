-- The recorded decisions about the messages of the JSON array ?2 (message
-- ids), newest first, at most ?1: a statement apart from resolutions.sql,
-- so that each message is found on the resolutions_message index instead
-- of a walk of every decision.
SELECT outbox_id, message_id, type, key, outcome, resolved_by, reason, resolved_at
  FROM {{p}}resolutions
 WHERE message_id IN (SELECT value FROM json_each(?2))
 ORDER BY id DESC LIMIT ?1;
