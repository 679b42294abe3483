-- Moves one entry to app $3, or releases it when $3 is '' (a type released
-- is refused at enqueue until someone registers it again). The owner was
-- compared under the lock of transfer_lock.sql in the same transaction.
WITH released AS (
    DELETE FROM {{schema}}.owners WHERE kind = $1 AND name = $2 AND $3::text = ''
)
UPDATE {{schema}}.owners SET app = $3::text, since = now()
WHERE kind = $1 AND name = $2 AND $3::text <> '';
