-- Of the rows ($1) a settle by token $2 did not change, the ones still
-- leased to $2: their lease ran out first (expired). Every other one was
-- claimed again under another token, or settled and deleted by another
-- relay (fenced). Sent only when a settle left rows unchanged.
SELECT id FROM {{schema}}.outbox
WHERE id = ANY($1::bigint[]) AND state = 'pending' AND lease_token = $2;
