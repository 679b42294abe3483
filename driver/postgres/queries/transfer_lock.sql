-- The current owner of one entry, locked until the transfer ends, so that
-- the compare and the set are one step against concurrent registrations.
SELECT coalesce(app, '') FROM {{schema}}.owners WHERE kind = $1 AND name = $2 FOR UPDATE;
