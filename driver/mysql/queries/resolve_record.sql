-- The record of one decision about a row in doubt, which outlives the row:
-- outbox id, message id, type, key, outcome, who, why, when ({{now}}).
INSERT INTO {{p}}resolutions (outbox_id, message_id, type, `key`, outcome, resolved_by, reason, resolved_at)
VALUES (?, ?, ?, ?, ?, ?, ?, {{now}});
