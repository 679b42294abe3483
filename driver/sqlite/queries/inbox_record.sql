-- Stores the dedup record of consumer ?1 and key ?2: the message ?3 and
-- the payload's digest ?4 (NULL for none), so that a later message under
-- the same key can be told apart from a redelivery. It changes no row when
-- the key is already recorded; the first record is then read with
-- inbox_first.sql. The caller's transaction, begun with BEGIN IMMEDIATE,
-- holds the write lock, so a concurrent twin waits and then sees this one.
INSERT INTO {{p}}inbox (consumer, key, message_id, received_at, payload_hash)
VALUES (?1, ?2, ?3, {{now}}, ?4)
ON CONFLICT (consumer, key) DO NOTHING;
